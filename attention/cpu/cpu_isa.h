// Which x86 vector path the CPU attention kernels take (internal to attention/cpu, its tests and
// benchmarks; engines never need it).
//
// The kernels are compiled three times: AVX-512 (F, BW, VL with FMA and F16C), AVX2 (with FMA
// and F16C) and portable C++. Each call picks the widest path the CPU supports, unless a path
// has been pinned — tests pin each path in turn to check it against the reference, and the
// benchmark can compare them. A pinned path applies to head dims it can vectorise; other head
// dims fall back to the next narrower path (see attention_kernel.h).
//
// Thread-safety: every function may be called from any thread. The pin is process-wide and
// read once at the start of each kernel call.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

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
// Returns to the detected path.
void UnpinCpuIsa();

// The pinned path, else the detected one.
CpuIsa ActiveCpuIsa();

}  // namespace tandem
