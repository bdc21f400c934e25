#include "model/cpu/dnnl_common.h"

#include <atomic>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tandem::dnnl_internal {
namespace {

std::atomic<int64_t> g_total_nanos{0};

}  // namespace

// oneDNN's C++ API reports errors by throwing dnnl::error; this file is the only place that
// catches them, turning each into an absl::Status.
absl::Status ToStatus(const dnnl::error& e, const char* what) {
  return absl::InternalError(absl::StrCat("oneDNN ", what, " failed: ", e.what(), " (status ",
                                          static_cast<int>(e.status), ")"));
}

const dnnl::engine& CpuEngine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// One in-order CPU stream per calling thread (streams are cheap but not free to create).
dnnl::stream& ThreadStream() {
  thread_local dnnl::stream stream(CpuEngine());
  return stream;
}

// Primitives run with a user-provided scratchpad from the calling thread: Debian's oneDNN is
// built without DNNL_ENABLE_CONCURRENT_EXEC, so in the default "library" mode all primitives
// share one scratchpad and rank threads executing concurrently would corrupt each other's GEMMs.
void* ThreadScratchpad(size_t bytes) {
  thread_local std::vector<char> buffer;
  if (buffer.size() < bytes + 64) buffer.resize(bytes + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(buffer.data());
  return reinterpret_cast<void*>((p + 63) & ~uintptr_t{63});
}

dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void AddGemmTime(std::chrono::steady_clock::duration d) {
  g_total_nanos.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(),
                          std::memory_order_relaxed);
}
double GemmSeconds() { return g_total_nanos.load() * 1e-9; }
void ResetGemmSeconds() { g_total_nanos.store(0); }

}  // namespace tandem::dnnl_internal
