// Paged attention with LSE (see cuda_attention.h for the contract).
//
// One thread block per (row, query head, split); its warps take the split's local tokens round
// robin, each keeping an online softmax (running max m, sum l, accumulator over head_dim spread
// across the lanes), and the block then combines its warps exactly as lse_merge.h combines
// partials. With one split the block writes the final output; with several it writes partials
// that LaunchMergePartials combines. Consecutive blocks are the query heads of one row, so the
// GQA heads sharing a KV head read it at about the same time (from L2 after the first).
#include <cuda_runtime.h>
#include <math.h>

#include "absl/strings/str_cat.h"
#include "attention/cuda/cuda_attention.h"
#include "attention/cuda/kv_access.cuh"
#include "common/cuda/cuda_status.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kPerLane = kMaxHeadDim / kWarpSize;  // accumulators per lane

template <KvDType kDType>
__global__ void __launch_bounds__(kThreads) AttendKernel(const PagedAttentionArgs a) {
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float m_s[kWarps];
  __shared__ float l_s[kWarps];
  __shared__ float acc_s[kWarps][kMaxHeadDim];

  const PoolGeometry& g = a.pool.geometry;
  const int32_t d = g.head_dim;
  const int32_t hq = a.num_q_heads;
  const int64_t items = a.rows.num_rows * hq;
  const int64_t item = blockIdx.x;
  const int32_t split = blockIdx.y;
  const int64_t row = item / hq;
  const int32_t head = static_cast<int32_t>(item % hq);
  const int32_t kv_head = head / (hq / g.num_kv_heads);
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;

  const int64_t pos = a.rows.position[row];
  const int64_t visible = pos < 0 ? 0 : LocalLen(a.rows.dcp, a.rows.dcp_rank, pos + 1);
  const int64_t begin = split * a.split.tokens_per_split;
  const int64_t end = min(visible, begin + a.split.tokens_per_split);

  for (int x = threadIdx.x; x < d; x += kThreads) q_s[x] = LoadQ(a.q, a.bf16_io, item * d + x);
  __syncthreads();

  float m = -INFINITY;
  float l = 0.f;
  float acc[kPerLane];
  float qr[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int x = lane + i * kWarpSize;
    acc[i] = 0.f;
    qr[i] = x < d ? q_s[x] : 0.f;
  }
  if (begin < end) {
    // Read only when the row has keys: padding rows carry no valid request index.
    const int32_t* table = a.rows.tables.table(a.rows.request[row]);
    for (int64_t t = begin + warp; t < end; t += kWarps) {
      const int64_t slot = SlotOfLocal(a.rows.dcp, t, table);
      const int64_t k_at = KvSlotElementIndex(g, slot, kv_head, a.layer, 0);
      const int64_t v_at = KvSlotElementIndex(g, slot, kv_head, a.layer, 1);
      float kx[kPerLane];
      float vx[kPerLane];
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int x = lane + i * kWarpSize;
        kx[i] = x < d ? LoadKv<kDType>(a.pool.base, k_at + x) : 0.f;
        vx[i] = x < d ? LoadKv<kDType>(a.pool.base, v_at + x) : 0.f;
      }
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) dot += qr[i] * kx[i];
      const float s = WarpSum(dot) * a.scale;
      const float m_new = fmaxf(m, s);
      const float correction = expf(m - m_new);  // m = −inf on the first key: 0
      const float p = expf(s - m_new);
      l = l * correction + p;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) acc[i] = acc[i] * correction + p * vx[i];
      m = m_new;
    }
  }
  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int x = lane + i * kWarpSize;
    if (x < d) acc_s[warp][x] = acc[i];
  }
  __syncthreads();

  // The final output (in the activation dtype) or this split's f32 partial.
  float* out;
  int64_t at;
  bool out16;
  float* lse;
  if (a.split.num_splits == 1) {
    out = a.out;
    at = item * d;
    out16 = a.bf16_io;
    lse = a.lse + item;
  } else {
    out = a.scratch;
    at = (split * items + item) * d;
    out16 = false;
    lse = a.scratch + int64_t{a.split.num_splits} * items * d + split * items + item;
  }
  float big_m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) big_m = fmaxf(big_m, m_s[w]);
  if (big_m == -INFINITY) {  // no key in this block's range: exact zeros and −inf
    for (int x = threadIdx.x; x < d; x += kThreads) StoreOut(out, out16, at + x, 0.f);
    if (threadIdx.x == 0) *lse = -INFINITY;
    return;
  }
  float weight[kWarps];
  float denom = 0.f;
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = m_s[w] == -INFINITY ? 0.f : expf(m_s[w] - big_m);
    denom += l_s[w] * weight[w];
  }
  for (int x = threadIdx.x; x < d; x += kThreads) {
    float sum = 0.f;
    for (int w = 0; w < kWarps; ++w) sum += acc_s[w][x] * weight[w];
    StoreOut(out, out16, at + x, sum / denom);
  }
  if (threadIdx.x == 0) *lse = big_m + logf(denom);
}

}  // namespace

absl::Status CheckPagedAttentionArgs(const PagedAttentionArgs& a) {
  const PoolGeometry& g = a.pool.geometry;
  if (g.head_dim < 1 || g.head_dim > kMaxHeadDim) {
    return absl::InvalidArgumentError(absl::StrCat("cuda attention: head_dim ", g.head_dim,
                                                   " is outside [1, ", kMaxHeadDim, "]"));
  }
  if (g.num_kv_heads < 1 || a.num_q_heads < 1 || a.num_q_heads % g.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda attention: num_q_heads=", a.num_q_heads,
                     " is not a positive multiple of num_kv_heads=", g.num_kv_heads));
  }
  if (g.dtype != KvDType::kF32 && g.dtype != KvDType::kF16 && g.dtype != KvDType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda attention: pool dtype ", static_cast<int>(g.dtype), " is unknown"));
  }
  if (a.layer < 0 || a.layer >= g.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda attention: layer ", a.layer, " is outside [0, ", g.num_layers, ")"));
  }
  if (a.rows.num_rows < 0 || a.rows.num_rows * a.num_q_heads > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda attention: rows x heads = ", a.rows.num_rows, " x ", a.num_q_heads,
                     " is outside [0, 2^31)"));
  }
  if (a.split.num_splits < 1 || a.split.num_splits > kMaxSplits || a.split.tokens_per_split < 1) {
    return absl::InvalidArgumentError(absl::StrCat("cuda attention: split of ", a.split.num_splits,
                                                   " x ", a.split.tokens_per_split,
                                                   " tokens is invalid"));
  }
  if (a.rows.num_rows == 0) return absl::OkStatus();
  if (a.q == nullptr || a.out == nullptr || a.lse == nullptr || a.pool.base == nullptr ||
      a.rows.position == nullptr || a.rows.request == nullptr) {
    return absl::InvalidArgumentError("cuda attention: a q/out/lse/pool/row pointer is null");
  }
  if (a.split.num_splits > 1 && a.scratch == nullptr) {
    return absl::InvalidArgumentError("cuda attention: a split launch needs scratch");
  }
  return absl::OkStatus();
}

absl::Status LaunchPagedAttention(const PagedAttentionArgs& a, void* stream) {
  if (absl::Status s = CheckPagedAttentionArgs(a); !s.ok()) return s;
  if (a.rows.num_rows == 0) return absl::OkStatus();
  const int64_t items = a.rows.num_rows * a.num_q_heads;
  const auto st = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(a.split.num_splits));
  switch (a.pool.geometry.dtype) {
    case KvDType::kF32:
      AttendKernel<KvDType::kF32><<<grid, kThreads, 0, st>>>(a);
      break;
    case KvDType::kF16:
      AttendKernel<KvDType::kF16><<<grid, kThreads, 0, st>>>(a);
      break;
    case KvDType::kBF16:
      AttendKernel<KvDType::kBF16><<<grid, kThreads, 0, st>>>(a);
      break;
  }
  TANDEM_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  if (a.split.num_splits == 1) return absl::OkStatus();
  const int32_t d = a.pool.geometry.head_dim;
  return LaunchMergePartials(a.split.num_splits, a.scratch,
                             a.scratch + int64_t{a.split.num_splits} * items * d, items, d, a.out,
                             a.lse, stream, a.bf16_io);
}

}  // namespace tandem::gpu
