#include "model/cpu/prefill_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "attention/kv_dtype.h"
#include "common/parallel_for.h"
#include "common/status_macros.h"
#include "model/cpu/avx512_math.h"
#include "model/cpu/dnnl_matmul.h"

namespace tandem::cpu {
namespace {

// Rows per score chunk (bounds the S matrix and the causal waste), and the rounding that keeps
// the number of distinct GEMM shapes (hence oneDNN primitives) small.
constexpr int64_t kChunkRows = 128;
constexpr int64_t kRoundKeys = 64;
constexpr int64_t kRoundRows = 32;

int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

const bool kHaveAvx512 = __builtin_cpu_supports("avx512f");

float ExpShiftSum(float* x, int64_t n, float shift) {
  if (kHaveAvx512) return ExpShiftSumAvx512(x, n, shift);
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

float ToFloat(const void* base, int64_t index, KvDType t) {
  switch (t) {
    case KvDType::kF32:
      return static_cast<const float*>(base)[index];
    case KvDType::kF16:
      return HalfToFloat(static_cast<const uint16_t*>(base)[index]);
    case KvDType::kBF16:
      return Bf16ToFloat(static_cast<const uint16_t*>(base)[index]);
  }
  return 0.f;
}

// dst[j][:] = K or V row of local token j of `head`, for j < count; zeros for j in
// [count, rows).
void GatherKv(const KvPoolView& pool, int32_t layer, int32_t head, int32_t kv, const int32_t* table,
              int64_t count, int64_t rows, float* dst) {
  const PoolGeometry& g = pool.geometry;
  const int64_t d = g.head_dim;
  const int64_t blocks = (count + g.block_size - 1) / g.block_size;
  ParallelFor(blocks, 4, [&](int64_t begin, int64_t end) {
    for (int64_t vb = begin; vb < end; ++vb) {
      const int64_t first = vb * g.block_size;
      const int64_t n = std::min<int64_t>(g.block_size, count - first);
      const int64_t src = KvElementIndex(g, table[vb], head, layer, kv, 0);
      float* out = dst + first * d;
      if (g.dtype == KvDType::kF32) {
        std::memcpy(out, static_cast<const float*>(pool.base) + src, n * d * sizeof(float));
      } else {
        for (int64_t i = 0; i < n * d; ++i) out[i] = ToFloat(pool.base, src + i, g.dtype);
      }
    }
  });
  if (rows > count) std::memset(dst + count * d, 0, (rows - count) * d * sizeof(float));
}

struct Scratch {
  std::vector<float> k, v, q, s, o;
  void Ensure(std::vector<float>& x, int64_t n) {
    if (static_cast<int64_t>(x.size()) < n) x.resize(n);
  }
};

}  // namespace

std::vector<std::vector<int64_t>> GemmAttentionGroups(const AttentionRows& rows) {
  std::map<int32_t, std::vector<int64_t>> by_request;
  for (int64_t i = 0; i < rows.num_rows; ++i) {
    if (rows.position[i] >= 0) by_request[rows.request[i]].push_back(i);
  }
  std::vector<std::vector<int64_t>> out;
  for (auto& [request, list] : by_request) {
    if (static_cast<int64_t>(list.size()) >= kGemmAttentionMinRows) out.push_back(std::move(list));
  }
  return out;
}

absl::Status RunGemmPrefillAttention(const KvPoolView& pool, int32_t layer,
                                     const AttentionRows& rows,
                                     const std::vector<std::vector<int64_t>>& groups,
                                     const float* q, int32_t num_q_heads, float scale, float* out,
                                     float* lse) {
  // A reference, not the thread_local itself: lambdas below run on OpenMP worker threads, where
  // the name would denote those threads' (empty) scratch.
  thread_local Scratch scratch;
  Scratch& sc = scratch;
  const PoolGeometry& g = pool.geometry;
  const int64_t d = g.head_dim;
  const int32_t group = num_q_heads / g.num_kv_heads;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (std::vector<int64_t> list : groups) {
    // Causal structure is by position: order the rows so each chunk sees a key prefix.
    std::sort(list.begin(), list.end(),
              [&](int64_t a, int64_t b) { return rows.position[a] < rows.position[b]; });
    const int32_t* table = rows.tables.table(rows.request[list.front()]);
    const int64_t max_keys = LocalLen(rows.dcp, rows.dcp_rank, rows.position[list.back()] + 1);
    const int64_t key_rows = RoundUp(std::max<int64_t>(max_keys, 1), kRoundKeys);
    sc.Ensure(sc.k, key_rows * d);
    sc.Ensure(sc.v, key_rows * d);
    for (int32_t h = 0; h < g.num_kv_heads; ++h) {
      GatherKv(pool, layer, h, 0, table, max_keys, key_rows, sc.k.data());
      GatherKv(pool, layer, h, 1, table, max_keys, key_rows, sc.v.data());
      for (size_t c0 = 0; c0 < list.size(); c0 += kChunkRows) {
        const int64_t n = std::min<int64_t>(kChunkRows, static_cast<int64_t>(list.size()) - c0);
        const int64_t* chunk = list.data() + c0;
        const int64_t keys =
            RoundUp(std::max<int64_t>(
                        LocalLen(rows.dcp, rows.dcp_rank, rows.position[chunk[n - 1]] + 1), 1),
                    kRoundKeys);
        const int64_t m = RoundUp(n * group, kRoundRows);
        sc.Ensure(sc.q, m * d);
        sc.Ensure(sc.s, m * keys);
        sc.Ensure(sc.o, m * d);
        // Q rows of this KV head's query heads, pre-scaled; padding rows zero.
        for (int64_t i = 0; i < n; ++i) {
          for (int32_t j = 0; j < group; ++j) {
            const float* src = q + (chunk[i] * num_q_heads + h * group + j) * d;
            float* dst = sc.q.data() + (i * group + j) * d;
            for (int64_t x = 0; x < d; ++x) dst[x] = src[x] * scale;
          }
        }
        std::memset(sc.q.data() + n * group * d, 0, (m - n * group) * d * sizeof(float));
        TANDEM_RETURN_IF_ERROR(
            MatMul(m, d, keys, sc.q.data(), sc.k.data(), /*b_transposed=*/true, sc.s.data()));
        // Masked softmax per (row, head): keys j < visible(row) only.
        ParallelFor(n * group, 4, [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t row = chunk[r / group];
            const int64_t visible = LocalLen(rows.dcp, rows.dcp_rank, rows.position[row] + 1);
            float* s = sc.s.data() + r * keys;
            const int64_t item = row * num_q_heads + h * group + r % group;
            if (visible == 0) {
              std::memset(s, 0, keys * sizeof(float));
              lse[item] = kNegInf;
              continue;
            }
            const float mx = *std::max_element(s, s + visible);
            const float sum = ExpShiftSum(s, visible, mx);
            const float inv = 1.f / sum;
            for (int64_t j = 0; j < visible; ++j) s[j] *= inv;
            std::memset(s + visible, 0, (keys - visible) * sizeof(float));
            lse[item] = mx + std::log(sum);
          }
        });
        TANDEM_RETURN_IF_ERROR(
            MatMul(m, keys, d, sc.s.data(), sc.v.data(), /*b_transposed=*/false, sc.o.data()));
        for (int64_t r = 0; r < n * group; ++r) {
          const int64_t row = chunk[r / group];
          std::memcpy(out + (row * num_q_heads + h * group + r % group) * d, sc.o.data() + r * d,
                      d * sizeof(float));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::cpu
