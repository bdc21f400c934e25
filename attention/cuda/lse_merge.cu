// Exact LSE merge and in-place correction (see cuda_attention.h; semantics of lse_merge.h).
//
// One warp per item: every lane computes the merged LSE with the shared MergeLse, then the lanes
// split head_dim. Partials with LSE −inf are skipped, so their outputs (even NaN) never matter.
#include <cuda_runtime.h>
#include <math.h>

#include "absl/strings/str_cat.h"
#include "attention/cuda/cuda_attention.h"
#include "attention/cuda/kv_access.cuh"
#include "attention/lse_merge.h"
#include "common/cuda/cuda_status.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 128;
constexpr int kItemsPerBlock = kThreads / kWarpSize;

__global__ void __launch_bounds__(kThreads)
    MergeKernel(int32_t n, const float* partial_out, const float* partial_lse, int64_t items,
                int32_t d, float* out, float* lse_out, bool out_bf16) {
  const int64_t item = int64_t{blockIdx.x} * kItemsPerBlock + threadIdx.x / kWarpSize;
  if (item >= items) return;
  const int lane = threadIdx.x % kWarpSize;
  const float merged = MergeLse(partial_lse + item, n, items);
  const int64_t o = item * d;
  if (merged == -INFINITY) {
    for (int x = lane; x < d; x += kWarpSize) StoreOut(out, out_bf16, o + x, 0.f);
  } else {
    for (int x = lane; x < d; x += kWarpSize) {
      float sum = 0.f;
      for (int32_t i = 0; i < n; ++i) {
        const float li = partial_lse[i * items + item];
        if (li == -INFINITY) continue;
        sum += expf(li - merged) * partial_out[(i * items + item) * d + x];
      }
      StoreOut(out, out_bf16, o + x, sum);
    }
  }
  if (lane == 0 && lse_out != nullptr) lse_out[item] = merged;
}

__global__ void __launch_bounds__(kThreads)
    CorrectKernel(int32_t n, int32_t me, const float* all_lse, int64_t items, int32_t d, float* out,
                  float* merged_lse) {
  const int64_t item = int64_t{blockIdx.x} * kItemsPerBlock + threadIdx.x / kWarpSize;
  if (item >= items) return;
  const int lane = threadIdx.x % kWarpSize;
  const float merged = MergeLse(all_lse + item, n, items);
  const float mine = all_lse[me * items + item];
  float* o = out + item * d;
  if (mine == -INFINITY) {
    for (int x = lane; x < d; x += kWarpSize) o[x] = 0.f;
  } else {
    const float w = expf(mine - merged);
    for (int x = lane; x < d; x += kWarpSize) o[x] *= w;
  }
  if (lane == 0 && merged_lse != nullptr) merged_lse[item] = merged;
}

absl::Status CheckMergeShape(const char* what, int32_t n, int64_t items, int32_t head_dim) {
  if (n < 1 || items < 0 || head_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": needs n >= 1, items >= 0, head_dim >= 1 (got n=", n,
                     ", items=", items, ", head_dim=", head_dim, ")"));
  }
  return absl::OkStatus();
}

unsigned Blocks(int64_t items) {
  return static_cast<unsigned>((items + kItemsPerBlock - 1) / kItemsPerBlock);
}

}  // namespace

absl::Status LaunchMergePartials(int32_t n, const float* partial_out, const float* partial_lse,
                                 int64_t items, int32_t head_dim, float* out, float* lse_out,
                                 void* stream, bool out_bf16) {
  if (absl::Status s = CheckMergeShape("cuda merge", n, items, head_dim); !s.ok()) return s;
  if (items == 0) return absl::OkStatus();
  MergeKernel<<<Blocks(items), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      n, partial_out, partial_lse, items, head_dim, out, lse_out, out_bf16);
  TANDEM_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchCorrectPartial(int32_t n, int32_t me, const float* all_lse, int64_t items,
                                  int32_t head_dim, float* out, float* merged_lse, void* stream) {
  if (absl::Status s = CheckMergeShape("cuda correct", n, items, head_dim); !s.ok()) return s;
  if (me < 0 || me >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda correct: partial ", me, " is outside [0, ", n, ")"));
  }
  if (items == 0) return absl::OkStatus();
  CorrectKernel<<<Blocks(items), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      n, me, all_lse, items, head_dim, out, merged_lse);
  TANDEM_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace tandem::gpu
