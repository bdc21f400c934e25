#include "attention/cpu/cpu_isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

// -1: nothing pinned; otherwise the CpuIsa value.
std::atomic<int> g_pinned{-1};

bool HasAvx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

bool HasAvx512() {
  return HasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable:
      return "portable";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

bool CpuSupports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable:
      return true;
    case CpuIsa::kAvx2:
      return HasAvx2();
    case CpuIsa::kAvx512:
      return HasAvx512();
  }
  return false;
}

CpuIsa DetectedCpuIsa() {
  // The CPU does not change under a running process, so detect once.
  static const CpuIsa detected = CpuSupports(CpuIsa::kAvx512) ? CpuIsa::kAvx512
                                 : CpuSupports(CpuIsa::kAvx2) ? CpuIsa::kAvx2
                                                              : CpuIsa::kPortable;
  return detected;
}

absl::Status PinCpuIsa(CpuIsa isa) {
  if (!CpuSupports(isa)) {
    const char* needs = isa == CpuIsa::kAvx512
                            ? "AVX-512F, AVX-512BW, AVX-512VL, AVX2, FMA and F16C"
                            : "AVX2, FMA and F16C";
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot pin the ", CpuIsaName(isa), " attention path: this CPU lacks one of ", needs));
  }
  g_pinned.store(static_cast<int>(isa), std::memory_order_relaxed);
  return absl::OkStatus();
}

void UnpinCpuIsa() { g_pinned.store(-1, std::memory_order_relaxed); }

absl::StatusOr<CpuIsa> ParseForcedCpuIsa(const char* value) {
  CpuIsa isa;
  if (std::strcmp(value, "avx512") == 0) {
    isa = CpuIsa::kAvx512;
  } else if (std::strcmp(value, "avx2") == 0) {
    isa = CpuIsa::kAvx2;
  } else if (std::strcmp(value, "portable") == 0) {
    isa = CpuIsa::kPortable;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("TANDEM_CPU_ISA='", value, "': expected avx512, avx2 or portable"));
  }
  if (!CpuSupports(isa)) {
    return absl::FailedPreconditionError(absl::StrCat("TANDEM_CPU_ISA=", value,
                                                      ": this CPU cannot run that path (it has ",
                                                      CpuIsaName(DetectedCpuIsa()), ")"));
  }
  return isa;
}

std::optional<CpuIsa> ForcedCpuIsa() {
  static const std::optional<CpuIsa> forced = []() -> std::optional<CpuIsa> {
    const char* value = std::getenv("TANDEM_CPU_ISA");
    if (value == nullptr || value[0] == '\0') return std::nullopt;
    absl::StatusOr<CpuIsa> isa = ParseForcedCpuIsa(value);
    if (!isa.ok()) {
      std::fprintf(stderr, "tandem: %s\n", isa.status().ToString().c_str());
      std::exit(2);
    }
    return *isa;
  }();
  return forced;
}

CpuIsa ActiveCpuIsa() {
  const int pinned = g_pinned.load(std::memory_order_relaxed);
  if (pinned >= 0) return static_cast<CpuIsa>(pinned);
  const std::optional<CpuIsa> forced = ForcedCpuIsa();
  return forced.has_value() ? *forced : DetectedCpuIsa();
}

std::string DescribeCpuIsa() {
  const std::optional<CpuIsa> forced = ForcedCpuIsa();
  if (!forced.has_value() || *forced == DetectedCpuIsa()) return CpuIsaName(DetectedCpuIsa());
  return absl::StrCat(CpuIsaName(*forced), " (forced by TANDEM_CPU_ISA; this CPU has ",
                      CpuIsaName(DetectedCpuIsa()), ")");
}

}  // namespace tandem
