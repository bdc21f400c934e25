// GQA split-KV paged decode attention (see cuda_attention.h for the contract and
// decode_attention_plan.h for the work decomposition; every index below comes from there).
//
// Per CTA (row, KV head, split): the query heads of one pass are staged in shared memory; each
// token group streams its tokens' K and V rows with 16-byte loads (kDecodeTokensPerGroup tokens
// in flight per lane), computes the scores of all the pass's query heads (partial dots over the
// lane's dimensions, summed by xor shuffles inside the group) and keeps one online softmax per
// head. Groups then merge inside the warp (shuffles) and warps through shared memory, exactly as
// lse_merge.h merges partials; the CTA writes the output and LSE, or with several splits a
// partial that LaunchMergePartials combines.
//
// Warp-uniformity: shuffles are always executed by all 32 lanes; a token past the split's end
// only predicates the softmax update, never the shuffles.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "attention/cuda/cuda_attention.h"
#include "attention/cuda/decode_attention_plan.h"
#include "attention/cuda/kv_access.cuh"
#include "common/cuda/cuda_status.h"

namespace tandem::gpu {
namespace {

template <KvDType kDType>
constexpr int kVecElems = kDecodeVecBytes / KvDTypeBytes(kDType);
template <KvDType kDType>
constexpr int kMaxVecs = kDecodeDimsPerLane / kVecElems<kDType>;

// Widens one 16-byte vector of KV elements to f32 (exact for f16 and bf16).
template <KvDType kDType>
__device__ __forceinline__ void Widen(const uint4 raw, float* x) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (kDType == KvDType::kF32) {
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = __uint_as_float(w[i]);
  } else if constexpr (kDType == KvDType::kBF16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // little endian: element 2i is the low half
      x[2 * i] = __uint_as_float(w[i] << 16);
      x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] & 0xffffu)));
      x[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] >> 16)));
    }
  }
}

__device__ __forceinline__ uint4 LoadVec(const void* pool, int64_t byte_offset) {
  return __ldg(reinterpret_cast<const uint4*>(static_cast<const char*>(pool) + byte_offset));
}

template <KvDType kDType, int kHeads>
__global__ void __launch_bounds__(kDecodeThreads)
    GqaSplitKvKernel(const PagedAttentionArgs a, const DecodeLaneShape s) {
  constexpr int kVec = kVecElems<kDType>;
  constexpr int kVecs = kMaxVecs<kDType>;
  constexpr int kDims = kVec * kVecs;
  constexpr int kU = kDecodeTokensPerGroup;
  constexpr int64_t kElemBytes = KvDTypeBytes(kDType);
  extern __shared__ float4 shared4[];
  float* const q_s = reinterpret_cast<float*>(shared4);  // [kHeads][d]

  const PoolGeometry& g = a.pool.geometry;
  const int32_t d = g.head_dim;
  const int32_t hq = a.num_q_heads;
  const int32_t hkv = g.num_kv_heads;
  const int32_t group = hq / hkv;
  const int64_t items = a.rows.num_rows * hq;
  const int64_t row = DecodeRowOf(blockIdx.x, hkv);
  const int32_t kv_head = DecodeKvHeadOf(blockIdx.x, hkv);
  const int32_t split = static_cast<int32_t>(blockIdx.y);
  const int32_t warp = static_cast<int32_t>(threadIdx.x) / 32;
  const int32_t lane = static_cast<int32_t>(threadIdx.x) % 32;
  const int32_t tgroup = DecodeGroupOf(s, static_cast<int32_t>(threadIdx.x));
  const int32_t glane = DecodeLaneInGroup(s, static_cast<int32_t>(threadIdx.x));
  float* const acc_s = q_s + kHeads * d;                 // [warps][kHeads][d]
  float* const m_s = acc_s + kDecodeWarps * kHeads * d;  // [warps][kHeads]
  float* const l_s = m_s + kDecodeWarps * kHeads;        // [warps][kHeads]

  const int64_t pos = a.rows.position[row];
  const int64_t visible = pos < 0 ? 0 : LocalLen(a.rows.dcp, a.rows.dcp_rank, pos + 1);
  const int64_t begin = DecodeSplitBegin(split, a.split.tokens_per_split);
  const int64_t end = DecodeSplitEnd(split, a.split.tokens_per_split, visible);
  // Read only when the row has keys here: padding rows carry no valid request index.
  const int32_t* table = begin < end ? a.rows.tables.table(a.rows.request[row]) : nullptr;
  const int64_t steps = DecodeSteps(s, end - begin);

  const int32_t passes = DecodeHeadPasses(group, kHeads);
  for (int32_t pass = 0; pass < passes; ++pass) {
    const int32_t heads = DecodeHeadsInPass(group, kHeads, pass);
    const int32_t head0 = DecodeQueryHead(kv_head, group, kHeads, pass, 0);
    for (int32_t x = threadIdx.x; x < kHeads * d; x += kDecodeThreads) {
      const int32_t h = x / d;
      q_s[x] = h < heads ? LoadQ(a.q, a.bf16_io, (row * hq + head0 + h) * d + x % d) : 0.f;
    }
    __syncthreads();

    float m[kHeads], l[kHeads], acc[kHeads][kDims];
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      m[h] = -INFINITY;
      l[h] = 0.f;
#pragma unroll
      for (int i = 0; i < kDims; ++i) acc[h][i] = 0.f;
    }

    for (int64_t step = 0; step < steps; ++step) {
      // Issue every load of the step first.
      uint4 kraw[kU][kVecs], vraw[kU][kVecs];
      bool valid[kU];
#pragma unroll
      for (int k = 0; k < kU; ++k) {
        const int64_t t = DecodeTokenOf(s, begin, step, k, tgroup);
        valid[k] = t < end;
        int64_t k_at = 0, v_at = 0;
        if (valid[k]) {
          const int64_t slot = SlotOfLocal(a.rows.dcp, t, table);
          k_at = KvSlotElementIndex(g, slot, kv_head, a.layer, 0) * kElemBytes;
          v_at = KvSlotElementIndex(g, slot, kv_head, a.layer, 1) * kElemBytes;
        }
#pragma unroll
        for (int v = 0; v < kVecs; ++v) {
          const int32_t c = DecodeChunkOf(s, glane, v);
          if (valid[k] && c < s.chunks) {
            kraw[k][v] = LoadVec(a.pool.base, k_at + int64_t{c} * kDecodeVecBytes);
            vraw[k][v] = LoadVec(a.pool.base, v_at + int64_t{c} * kDecodeVecBytes);
          } else {
            kraw[k][v] = make_uint4(0, 0, 0, 0);
            vraw[k][v] = make_uint4(0, 0, 0, 0);
          }
        }
      }
#pragma unroll
      for (int k = 0; k < kU; ++k) {
        float kx[kDims];
#pragma unroll
        for (int v = 0; v < kVecs; ++v) Widen<kDType>(kraw[k][v], kx + v * kVec);
        float dot[kHeads];
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          dot[h] = 0.f;
#pragma unroll
          for (int v = 0; v < kVecs; ++v) {
            const int32_t c = DecodeChunkOf(s, glane, v);
            if (c < s.chunks) {
              const float* qv = q_s + h * d + c * kVec;
#pragma unroll
              for (int e = 0; e < kVec; ++e) dot[h] += qv[e] * kx[v * kVec + e];
            }
          }
        }
        // Sum over the group's lanes (xor distances below lanes_per_token stay in the group).
        for (int32_t off = s.lanes_per_token / 2; off > 0; off /= 2) {
#pragma unroll
          for (int h = 0; h < kHeads; ++h) dot[h] += __shfl_xor_sync(kFullMask, dot[h], off);
        }
        if (!valid[k]) continue;
        float vx[kDims];
#pragma unroll
        for (int v = 0; v < kVecs; ++v) Widen<kDType>(vraw[k][v], vx + v * kVec);
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          const float sc = dot[h] * a.scale;
          const float m_new = fmaxf(m[h], sc);
          const float correction = expf(m[h] - m_new);  // m = −inf on the first key: 0
          const float p = expf(sc - m_new);
          l[h] = l[h] * correction + p;
#pragma unroll
          for (int i = 0; i < kDims; ++i) acc[h][i] = acc[h][i] * correction + p * vx[i];
          m[h] = m_new;
        }
      }
    }

    // Merge the warp's groups: partner lane ^ off (off >= lanes_per_token) owns the same dims.
    for (int32_t off = s.lanes_per_token; off < 32; off *= 2) {
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        const float mo = __shfl_xor_sync(kFullMask, m[h], off);
        const float lo = __shfl_xor_sync(kFullMask, l[h], off);
        const float mn = fmaxf(m[h], mo);
        const float wa = m[h] == -INFINITY ? 0.f : expf(m[h] - mn);
        const float wb = mo == -INFINITY ? 0.f : expf(mo - mn);
        l[h] = l[h] * wa + lo * wb;
#pragma unroll
        for (int i = 0; i < kDims; ++i) {
          const float ao = __shfl_xor_sync(kFullMask, acc[h][i], off);
          acc[h][i] = acc[h][i] * wa + ao * wb;
        }
        m[h] = mn;
      }
    }
    // Group 0 of every warp (lanes [0, lanes_per_token)) now holds the warp's softmax.
    if (lane < s.lanes_per_token) {
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (lane == 0) {
          m_s[warp * kHeads + h] = m[h];
          l_s[warp * kHeads + h] = l[h];
        }
#pragma unroll
        for (int v = 0; v < kVecs; ++v) {
          const int32_t c = DecodeChunkOf(s, glane, v);
          if (c < s.chunks) {
#pragma unroll
            for (int e = 0; e < kVec; ++e) {
              acc_s[(warp * kHeads + h) * d + c * kVec + e] = acc[h][v * kVec + e];
            }
          }
        }
      }
    }
    __syncthreads();

    // Combine the warps and write (h, x) of the pass's heads.
    for (int32_t hx = threadIdx.x; hx < heads * d; hx += kDecodeThreads) {
      const int32_t h = hx / d;
      const int32_t x = hx % d;
      const int64_t item = row * hq + head0 + h;
      // The final output (in the activation dtype) or this split's f32 partial.
      float* out;
      int64_t at;
      bool out16;
      float* lse;
      if (a.split.num_splits == 1) {
        out = a.out;
        at = item * d + x;
        out16 = a.bf16_io;
        lse = a.lse + item;
      } else {
        out = a.scratch;
        at = (split * items + item) * d + x;
        out16 = false;
        lse = a.scratch + int64_t{a.split.num_splits} * items * d + split * items + item;
      }
      float big_m = -INFINITY;
      for (int w = 0; w < kDecodeWarps; ++w) big_m = fmaxf(big_m, m_s[w * kHeads + h]);
      if (big_m == -INFINITY) {  // no key in this split: exact zeros and −inf
        StoreOut(out, out16, at, 0.f);
        if (x == 0) *lse = -INFINITY;
        continue;
      }
      float denom = 0.f;
      float sum = 0.f;
      for (int w = 0; w < kDecodeWarps; ++w) {
        const float mw = m_s[w * kHeads + h];
        const float weight = mw == -INFINITY ? 0.f : expf(mw - big_m);
        denom += l_s[w * kHeads + h] * weight;
        sum += acc_s[(w * kHeads + h) * d + x] * weight;
      }
      StoreOut(out, out16, at, sum / denom);
      if (x == 0) *lse = big_m + logf(denom);
    }
    __syncthreads();  // the next pass overwrites q_s, acc_s, m_s, l_s
  }
}

template <KvDType kDType>
absl::Status LaunchForDType(const PagedAttentionArgs& a, const DecodeAttentionPlan& p,
                            cudaStream_t st) {
  const dim3 grid(static_cast<unsigned>(p.grid_x), static_cast<unsigned>(p.grid_y));
  const size_t shared = static_cast<size_t>(p.shared_bytes);
  switch (p.heads_per_pass) {
    case 1:
      GqaSplitKvKernel<kDType, 1><<<grid, kDecodeThreads, shared, st>>>(a, p.lanes);
      break;
    case 2:
      GqaSplitKvKernel<kDType, 2><<<grid, kDecodeThreads, shared, st>>>(a, p.lanes);
      break;
    case 4:
      GqaSplitKvKernel<kDType, 4><<<grid, kDecodeThreads, shared, st>>>(a, p.lanes);
      break;
    case 8:
      GqaSplitKvKernel<kDType, 8><<<grid, kDecodeThreads, shared, st>>>(a, p.lanes);
      break;
    default:
      return absl::InternalError(
          absl::StrCat("gqa_split_kv attention: heads_per_pass ", p.heads_per_pass));
  }
  TANDEM_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchForPool(const PagedAttentionArgs& a, const DecodeAttentionPlan& p,
                           cudaStream_t st) {
  switch (a.pool.geometry.dtype) {
    case KvDType::kF32:
      return LaunchForDType<KvDType::kF32>(a, p, st);
    case KvDType::kF16:
      return LaunchForDType<KvDType::kF16>(a, p, st);
    case KvDType::kBF16:
      return LaunchForDType<KvDType::kBF16>(a, p, st);
  }
  return absl::InvalidArgumentError("gqa_split_kv attention: unknown pool dtype");
}

}  // namespace

absl::Status LaunchDecodeAttention(const PagedAttentionArgs& a, void* stream) {
  if (absl::Status s = CheckPagedAttentionArgs(a); !s.ok()) return s;
  if (a.rows.num_rows == 0) return absl::OkStatus();
  absl::StatusOr<DecodeAttentionPlan> plan =
      PlanDecodeAttentionWithSplit(a.rows.num_rows, a.num_q_heads, a.pool.geometry, a.split);
  if (!plan.ok()) return plan.status();
  if (reinterpret_cast<uintptr_t>(a.pool.base) % kDecodeVecBytes != 0) {
    return absl::InvalidArgumentError(
        "gqa_split_kv attention: the pool base is not 16-byte aligned");
  }
  const absl::Status launched = LaunchForPool(a, *plan, static_cast<cudaStream_t>(stream));
  if (!launched.ok()) return launched;
  if (a.split.num_splits == 1) return absl::OkStatus();
  const int64_t items = a.rows.num_rows * a.num_q_heads;
  const int32_t d = a.pool.geometry.head_dim;
  return LaunchMergePartials(a.split.num_splits, a.scratch,
                             a.scratch + int64_t{a.split.num_splits} * items * d, items, d, a.out,
                             a.lse, stream, a.bf16_io);
}

}  // namespace tandem::gpu
