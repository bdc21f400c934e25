#include "attention/cpu/cpu_isa.h"

#include <atomic>

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

CpuIsa ActiveCpuIsa() {
  const int pinned = g_pinned.load(std::memory_order_relaxed);
  return pinned < 0 ? DetectedCpuIsa() : static_cast<CpuIsa>(pinned);
}

}  // namespace tandem
