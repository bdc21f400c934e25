// Which x86 vector path the CPU attention kernels take (internal to attention/cpu, its tests and
// benchmarks; engines never need it).
//
// The kernels are compiled three times: AVX-512 (F, BW, VL with FMA and F16C), AVX2 (with FMA
// and F16C) and portable C++. Each call picks the widest path the CPU supports, unless a path
// has been pinned — tests pin each path in turn to check it against the reference, and the
// benchmark can compare them. A pinned path applies to head dims it can vectorise; other head
// dims fall back to the next narrower path (see attention_kernel.h).
//
// The environment variable TANDEM_CPU_ISA (avx512, avx2 or portable) forces a path for the
// whole process — every kernel of attention/cpu and model/cpu, and oneDNN's GEMMs (capped to
// the same instruction set) — so that an AVX-512 machine can run the suite and the benchmarks
// on the AVX2 and portable paths too; figures taken that way are labelled "forced". It is read
// once, at the first kernel call; a value that is not one of the three, or a path this CPU cannot
// run, ends the process with a message naming the variable (a silently ignored force would make
// a "forced AVX2" record a lie).
//
// Thread-safety: every function may be called from any thread. The pin is process-wide and
// read once at the start of each kernel call.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem {

enum class CpuIsa : uint8_t { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

const char* CpuIsaName(CpuIsa isa);

// Whether this CPU can run the `isa` path. kPortable is always supported.
bool CpuSupports(CpuIsa isa);

// The widest path this CPU supports.
CpuIsa DetectedCpuIsa();

// Pins the path that later kernel calls use. FAILED_PRECONDITION naming the missing CPU
// features when this CPU cannot run it (the previous setting is kept).
[[nodiscard]] absl::Status PinCpuIsa(CpuIsa isa);
// Returns to the forced (TANDEM_CPU_ISA) or detected path.
void UnpinCpuIsa();

// The pinned path, else the path TANDEM_CPU_ISA forces, else the detected one.
CpuIsa ActiveCpuIsa();

// The path TANDEM_CPU_ISA forces, if set (exits the process on a bad value, as above).
std::optional<CpuIsa> ForcedCpuIsa();

// Parses a TANDEM_CPU_ISA value: INVALID_ARGUMENT naming the variable for an unknown name,
// FAILED_PRECONDITION for a path this CPU cannot run.
[[nodiscard]] absl::StatusOr<CpuIsa> ParseForcedCpuIsa(const char* value);

// One line for logs and benchmark headers: "avx512", "avx2 (forced by TANDEM_CPU_ISA; this CPU
// has avx512)".
std::string DescribeCpuIsa();

}  // namespace tandem
