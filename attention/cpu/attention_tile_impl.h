// The attend-tile and store-row algorithms, written once over a vector "traits" type. Included
// only by attention_kernel_{avx512,avx2,portable}.cc, each with its own ISA flags.
//
// Each of those files defines its traits in an anonymous namespace, so every instantiation here
// has internal linkage: the linker can never merge an AVX-512 copy into the portable path. For
// the same reason these templates call no inline function shared with other translation units,
// only the traits, intrinsics and C library functions.
//
// Traits interface (V is the vector of kLanes floats):
//   kLanes, kQueryBlock (queries scored together), kTokenBlock (tokens scored together),
//   kValueChunks (vectors of each V row accumulated together)
//   StoreSums(acc[kQueryBlock][kTokenBlock], p): p[q·kPieceTokens + t] = Σ lanes of acc[q][t]
//   Zero, Set1, Load, Store, Add, Sub, Mul, Max, Fma(a, b, c) = a·b + c, ReduceAdd, ReduceMax
//   Exp(x): e^x per lane, exactly 0 below −87.3 (so e^−inf = 0)
//   MaskTail(x, valid): x with lanes >= valid set to −inf (valid may be <= 0 or >= kLanes)
//   LoadKv(const Storage*, Tag) → V, StoreKv(Storage*, V, Tag) for Tag in KvF32, KvF16, KvBF16
//   Traits with kLanes == kPieceTokens (AVX-512), or naming such traits as QueryLanes (AVX2: a
//   pair of 8-lane vectors), also take the query-lanes path (attention_tile_query_lanes.h); the
//   16-lane traits define MaskFrom(x, limit, pos): x with the lanes whose limit <= pos set to
//   −inf.
//
// Key-lanes algorithm (AttendTileKeyLanes, per tile): scale q once; walk the token range in pieces
// of ≤ kPieceTokens tokens that never cross a block; per piece score all queries against the K
// rows, mask tokens past each query's causal limit, update each query's running max / sum /
// accumulator (online softmax), then accumulate the V rows. K and V of each piece are read from
// memory once for the whole tile; the next piece's rows are prefetched while the current one is
// computed.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attention/cpu/attention_kernel.h"

namespace tandem::attention_cpu {

struct KvF32 {
  using Storage = float;
};
struct KvF16 {
  using Storage = uint16_t;
};
struct KvBF16 {
  using Storage = uint16_t;
};

inline constexpr int kCacheLine = 64;

// Into L2 (the "T1" hint): the line is needed about a piece later, and keeping it out of L1
// leaves L1 to the rows being computed on. (Templated on the traits for internal linkage.)
template <class T>
inline void PrefetchLine(const void* p) {
  __builtin_prefetch(p, 0, 2);
}

// Scores kQ consecutive queries (scaled, [kQ][head_dim] at qs) against the n K rows at k:
// p[q·kPieceTokens + t] = qs[q]·k[t] for t < n. Entries in [n, kPieceTokens) may be written
// with values the caller masks. When pf is not null, also prefetches the first n rows at pf.
template <class T, class E, int kQ>
inline void ScoreQueries(const float* qs, int32_t head_dim, const typename E::Storage* k, int32_t n,
                         float* p, const typename E::Storage* pf) {
  using V = typename T::V;
  constexpr int kT = T::kTokenBlock;
  for (int32_t t0 = 0; t0 < n; t0 += kT) {
    // A partial token block re-reads the piece's last row instead of reading past it.
    const typename E::Storage* rows[kT];
#pragma GCC unroll 16
    for (int tt = 0; tt < kT; ++tt) {
      const int32_t t = t0 + tt < n ? t0 + tt : n - 1;
      rows[tt] = k + static_cast<int64_t>(t) * head_dim;
    }
    V acc[kQ][kT];
#pragma GCC unroll 16
    for (int qq = 0; qq < kQ; ++qq) {
#pragma GCC unroll 16
      for (int tt = 0; tt < kT; ++tt) acc[qq][tt] = T::Zero();
    }
    for (int32_t c = 0; c < head_dim; c += T::kLanes) {
      V kv[kT];
#pragma GCC unroll 16
      for (int tt = 0; tt < kT; ++tt) kv[tt] = T::LoadKv(rows[tt] + c, E{});
      if (pf != nullptr) {
#pragma GCC unroll 16
        for (int tt = 0; tt < kT; ++tt)
          PrefetchLine<T>(pf + static_cast<int64_t>(t0 + tt) * head_dim + c);
      }
#pragma GCC unroll 16
      for (int qq = 0; qq < kQ; ++qq) {
        const V qv = T::Load(qs + static_cast<int64_t>(qq) * head_dim + c);
#pragma GCC unroll 16
        for (int tt = 0; tt < kT; ++tt) acc[qq][tt] = T::Fma(qv, kv[tt], acc[qq][tt]);
      }
    }
    if constexpr (kQ == T::kQueryBlock) {
      T::StoreSums(acc, p + t0);  // all kQ·kT reductions at once, sharing shuffles
    } else {
#pragma GCC unroll 16
      for (int qq = 0; qq < kQ; ++qq) {
#pragma GCC unroll 16
        for (int tt = 0; tt < kT; ++tt) p[qq * kPieceTokens + t0 + tt] = T::ReduceAdd(acc[qq][tt]);
      }
    }
  }
}

// Where the weight of query q for token t sits in a piece's weights p: p[q·ws.q + t·ws.t]
// (query-major with stride kPieceTokens for the key-lanes path, token-major for query lanes).
struct WeightStrides {
  int32_t q = kPieceTokens;
  int32_t t = 1;
};

// acc[q][c .. c + kC·lanes) += Σ_t w(q, t) · v[t][c .. c + kC·lanes) for kQ queries and the n V
// rows at v: kQ·kC accumulators stay in registers across the tokens. When pf is not null, also
// prefetches the same columns of the first n rows at pf.
template <class T, class E, int kQ, int kC>
inline void AccumulateColumns(const float* p, WeightStrides ws, int32_t head_dim,
                              const typename E::Storage* v, int32_t n, float* acc, int32_t c,
                              const typename E::Storage* pf) {
  using V = typename T::V;
  V a[kQ][kC];
#pragma GCC unroll 16
  for (int qq = 0; qq < kQ; ++qq) {
#pragma GCC unroll 16
    for (int cc = 0; cc < kC; ++cc) {
      a[qq][cc] = T::Load(acc + static_cast<int64_t>(qq) * head_dim + c + cc * T::kLanes);
    }
  }
  for (int32_t t = 0; t < n; ++t) {
    const typename E::Storage* row = v + static_cast<int64_t>(t) * head_dim + c;
    V vv[kC];
#pragma GCC unroll 16
    for (int cc = 0; cc < kC; ++cc) vv[cc] = T::LoadKv(row + cc * T::kLanes, E{});
    if (pf != nullptr) {
      const char* line = reinterpret_cast<const char*>(pf + static_cast<int64_t>(t) * head_dim + c);
      constexpr int kBytes = kC * T::kLanes * static_cast<int>(sizeof(*pf));
#pragma GCC unroll 16
      for (int off = 0; off < kBytes; off += kCacheLine) PrefetchLine<T>(line + off);
    }
#pragma GCC unroll 16
    for (int qq = 0; qq < kQ; ++qq) {
      const V w = T::Set1(p[qq * ws.q + t * ws.t]);
#pragma GCC unroll 16
      for (int cc = 0; cc < kC; ++cc) a[qq][cc] = T::Fma(w, vv[cc], a[qq][cc]);
    }
  }
#pragma GCC unroll 16
  for (int qq = 0; qq < kQ; ++qq) {
#pragma GCC unroll 16
    for (int cc = 0; cc < kC; ++cc) {
      T::Store(acc + static_cast<int64_t>(qq) * head_dim + c + cc * T::kLanes, a[qq][cc]);
    }
  }
}

// acc[q][:] += Σ_t w(q, t) · v[t][:] for kQ queries and the n V rows at v.
template <class T, class E, int kQ>
inline void AccumulateValues(const float* p, WeightStrides ws, int32_t head_dim,
                             const typename E::Storage* v, int32_t n, float* acc,
                             const typename E::Storage* pf) {
  constexpr int kC = T::kValueChunks;
  int32_t c = 0;
  for (; c + kC * T::kLanes <= head_dim; c += kC * T::kLanes) {
    AccumulateColumns<T, E, kQ, kC>(p, ws, head_dim, v, n, acc, c, pf);
  }
  for (; c < head_dim; c += T::kLanes)
    AccumulateColumns<T, E, kQ, 1>(p, ws, head_dim, v, n, acc, c, pf);
}

template <class T, class E>
inline void ScoreAll(const float* qs, int32_t nq, int32_t head_dim, const typename E::Storage* k,
                     int32_t n, float* p, const typename E::Storage* pf) {
  static_assert(T::kQueryBlock == 4, "the dispatch below covers blocks of up to 4 queries");
  for (int32_t i = 0; i < nq; i += 4) {
    const float* qi = qs + static_cast<int64_t>(i) * head_dim;
    float* pi = p + i * kPieceTokens;
    switch (nq - i) {
      case 1:
        ScoreQueries<T, E, 1>(qi, head_dim, k, n, pi, i == 0 ? pf : nullptr);
        break;
      case 2:
        ScoreQueries<T, E, 2>(qi, head_dim, k, n, pi, i == 0 ? pf : nullptr);
        break;
      case 3:
        ScoreQueries<T, E, 3>(qi, head_dim, k, n, pi, i == 0 ? pf : nullptr);
        break;
      default:
        ScoreQueries<T, E, 4>(qi, head_dim, k, n, pi, i == 0 ? pf : nullptr);
        break;
    }
  }
}

template <class T, class E>
inline void AccumulateAll(const float* p, WeightStrides ws, int32_t nq, int32_t head_dim,
                          const typename E::Storage* v, int32_t n, float* acc,
                          const typename E::Storage* pf) {
  for (int32_t i = 0; i < nq; i += 4) {
    const float* pi = p + i * ws.q;
    float* ai = acc + static_cast<int64_t>(i) * head_dim;
    switch (nq - i) {
      case 1:
        AccumulateValues<T, E, 1>(pi, ws, head_dim, v, n, ai, i == 0 ? pf : nullptr);
        break;
      case 2:
        AccumulateValues<T, E, 2>(pi, ws, head_dim, v, n, ai, i == 0 ? pf : nullptr);
        break;
      case 3:
        AccumulateValues<T, E, 3>(pi, ws, head_dim, v, n, ai, i == 0 ? pf : nullptr);
        break;
      default:
        AccumulateValues<T, E, 4>(pi, ws, head_dim, v, n, ai, i == 0 ? pf : nullptr);
        break;
    }
  }
}

// Turns the raw scores of one query's piece (p, kPieceTokens floats, valid below `valid`) into
// softmax weights relative to the query's running max m, rescaling l and acc when m grows.
template <class T>
[[gnu::always_inline]] inline void SoftmaxStep(float* p, int32_t valid, int32_t head_dim, float& m,
                                               float& l, float* acc) {
  using V = typename T::V;
  constexpr int kVectors = kPieceTokens / T::kLanes;
  V x[kVectors];
  V mx = T::Set1(-INFINITY);
#pragma GCC unroll 16
  for (int i = 0; i < kVectors; ++i) {
    x[i] = T::MaskTail(T::Load(p + i * T::kLanes), valid - i * T::kLanes);
    mx = T::Max(mx, x[i]);
  }
  const float piece_max = T::ReduceMax(mx);
  if (piece_max == -INFINITY) {  // nothing visible in this piece: weights 0, state unchanged
#pragma GCC unroll 16
    for (int i = 0; i < kVectors; ++i) T::Store(p + i * T::kLanes, T::Zero());
    return;
  }
  if (piece_max > m) {
    if (l > 0.f) {
      const float corr = expf(m - piece_max);
      l *= corr;
      const V cv = T::Set1(corr);
      for (int32_t c = 0; c < head_dim; c += T::kLanes) {
        T::Store(acc + c, T::Mul(T::Load(acc + c), cv));
      }
    }
    m = piece_max;
  }
  const V mv = T::Set1(m);
  V sum = T::Zero();
#pragma GCC unroll 16
  for (int i = 0; i < kVectors; ++i) {
    const V e = T::Exp(T::Sub(x[i], mv));
    T::Store(p + i * T::kLanes, e);
    sum = T::Add(sum, e);
  }
  l += T::ReduceAdd(sum);
}

template <class T, class E>
void AttendTileKeyLanes(const TileArgs& a) {
  using S = typename E::Storage;
  using V = typename T::V;
  const int32_t nq = a.num_queries;
  const int32_t d = a.head_dim;
  const int64_t bs = a.block_size;
  float* const qs = a.scratch;                           // [nq][d] scaled queries
  float* const acc = qs + static_cast<int64_t>(nq) * d;  // [nq][d] unnormalised outputs
  float* const p = acc + static_cast<int64_t>(nq) * d;   // [nq][kPieceTokens] scores/weights
  float m[kMaxTileQueries];
  float l[kMaxTileQueries];

  int64_t end = a.token_begin;
  const V scale = T::Set1(a.scale);
  for (int32_t i = 0; i < nq; ++i) {
    float* qi = qs + static_cast<int64_t>(i) * d;
    float* ai = acc + static_cast<int64_t>(i) * d;
    for (int32_t c = 0; c < d; c += T::kLanes) {
      T::Store(qi + c, T::Mul(T::Load(a.q[i] + c), scale));
      T::Store(ai + c, T::Zero());
    }
    m[i] = -INFINITY;
    l[i] = 0.f;
    const int64_t limit = a.visible[i] < a.token_end ? a.visible[i] : a.token_end;
    if (limit > end) end = limit;
  }

  const int64_t row_elems = bs * d;
  for (int64_t j = a.token_begin; j < end;) {
    const int64_t b = j / bs;
    const int64_t off = j - b * bs;
    int64_t len = bs - off;
    if (end - j < len) len = end - j;
    if (len > kPieceTokens) len = kPieceTokens;
    const int32_t n = static_cast<int32_t>(len);
    const S* k = reinterpret_cast<const S*>(a.kv_base + a.block_ids[b] * a.block_bytes) + off * d;
    const S* v = k + row_elems;
    // The next piece's rows, fetched while this piece is computed: blocks sit at unrelated
    // addresses, so the hardware prefetcher cannot run ahead across a block boundary, and the
    // V rows are read only after all of the piece's scores. Its V rows are prefetched during
    // this piece's scoring, its K rows during this piece's V accumulation.
    const S* next_k = nullptr;
    if (j + len < end) {
      const int64_t nb = (j + len) / bs;
      next_k = reinterpret_cast<const S*>(a.kv_base + a.block_ids[nb] * a.block_bytes) +
               (j + len - nb * bs) * d;
    }
    const S* next_v = next_k == nullptr ? nullptr : next_k + row_elems;
    ScoreAll<T, E>(qs, nq, d, k, n, p, next_v);
    for (int32_t i = 0; i < nq; ++i) {
      int64_t valid = a.visible[i] - j;
      valid = valid < 0 ? 0 : (valid > n ? n : valid);
      SoftmaxStep<T>(p + i * kPieceTokens, static_cast<int32_t>(valid), d, m[i], l[i],
                     acc + static_cast<int64_t>(i) * d);
    }
    AccumulateAll<T, E>(p, WeightStrides{}, nq, d, v, n, acc, next_k);
    j += len;
  }

  for (int32_t i = 0; i < nq; ++i) {
    float* o = a.out[i];
    const float* ai = acc + static_cast<int64_t>(i) * d;
    if (l[i] == 0.f) {
      for (int32_t c = 0; c < d; c += T::kLanes) T::Store(o + c, T::Zero());
      *a.lse[i] = -INFINITY;
      continue;
    }
    const V inv = T::Set1(1.f / l[i]);
    for (int32_t c = 0; c < d; c += T::kLanes) T::Store(o + c, T::Mul(T::Load(ai + c), inv));
    *a.lse[i] = m[i] + logf(l[i]);
  }
}

template <class T>
void StoreRowImpl(const float* src, void* dst, int64_t n, KvDType dtype) {
  switch (dtype) {
    case KvDType::kF32:
      memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case KvDType::kF16:
      for (int64_t c = 0; c < n; c += T::kLanes)
        T::StoreKv(static_cast<uint16_t*>(dst) + c, T::Load(src + c), KvF16{});
      return;
    case KvDType::kBF16:
      for (int64_t c = 0; c < n; c += T::kLanes)
        T::StoreKv(static_cast<uint16_t*>(dst) + c, T::Load(src + c), KvBF16{});
      return;
  }
}

}  // namespace tandem::attention_cpu
