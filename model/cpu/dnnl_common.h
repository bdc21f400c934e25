// Shared plumbing of Tandem's oneDNN users (dnnl_linear.cc, dnnl_matmul.cc); not a public API.
//
// * oneDNN's C++ API reports errors by throwing dnnl::error; ToStatus is the one place they
//   become absl::Status (callers catch in their own translation unit).
// * Primitives run with a user scratchpad from the calling thread: Debian's oneDNN is built
//   without DNNL_ENABLE_CONCURRENT_EXEC, so in the default "library" mode all primitives share
//   one scratchpad and rank threads executing concurrently would corrupt each other's GEMMs.
// * Time spent executing primitives is summed process-wide (benchmarks report the share of
//   forward time inside the GEMM library).
#pragma once

#include <chrono>
#include <cstddef>
#include <oneapi/dnnl/dnnl.hpp>

#include "absl/status/status.h"

namespace tandem::dnnl_internal {

absl::Status ToStatus(const dnnl::error& e, const char* what);
const dnnl::engine& CpuEngine();
dnnl::stream& ThreadStream();          // one in-order stream per calling thread
void* ThreadScratchpad(size_t bytes);  // 64-byte aligned, grown on demand, per thread
dnnl::primitive_attr UserScratchpad();

void AddGemmTime(std::chrono::steady_clock::duration d);
double GemmSeconds();
void ResetGemmSeconds();

}  // namespace tandem::dnnl_internal
