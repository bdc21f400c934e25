// The query-lanes attend-tile path and the entry point that picks a path per tile. Included only
// by attention_kernel_{avx512,avx2,portable}.cc (see attention_tile_impl.h for why).
//
// The key-lanes path scores a query against a K row with a dot product whose lanes run over
// head_dim, so every score ends in a horizontal reduction; with head_dim 64 that reduction costs
// about as much as the four FMAs before it. A tile of many queries (prefill rows × GQA heads)
// does better with the queries in the lanes: the scaled queries are transposed once per tile to
// qt[c][lane], and the scores of token t for all queries are Σ_c qt[c] · k[t][c], one
// broadcast-FMA per (token, c) and no reduction. The online softmax then runs per lane (mask,
// max, exp and sum over the piece's token vectors), and the weights, stored token-major, feed
// the same V accumulation as the key-lanes path.
//
// The path needs a vector of kPieceTokens = 16 lanes: AVX-512's own, or on AVX2 a traits type
// whose V is a pair of 8-lane vectors (attention_kernel_avx2.cc: the key-lanes traits name it
// as QueryLanes). Each lane's arithmetic is the same FMA, max, exp and add sequence on either,
// so the two ISAs' query-lanes outputs are the same bits. Such traits may also name Narrow (the
// native traits, which accumulate V: the per-element sums do not depend on the vector width)
// and kScoreTokens (tokens scored per pass over the queries, so the score accumulators fit the
// register file: AVX-512 holds 16, AVX2 pairs 4).
#pragma once

#include <type_traits>

#include "attention/cpu/attention_tile_impl.h"

namespace tandem::attention_cpu {

// Tokens T scores per pass over the queries (T::kScoreTokens, else all of a piece).
template <class T>
constexpr int32_t ScoreTokensOf() {
  if constexpr (requires { T::kScoreTokens; }) {
    return T::kScoreTokens;
  } else {
    return kPieceTokens;
  }
}

// The traits that accumulate V rows for T (T::Narrow, else T itself).
template <class T>
struct NarrowOf {
  using type = T;
};
template <class T>
requires requires { typename T::Narrow; }
struct NarrowOf<T> {
  using type = typename T::Narrow;
};

// s[t] = Σ_c qt[c] · kp[t][c] for the kT token rows at kp ([kT][kD] f32): one broadcast-FMA per
// (token, c), in passes of up to ScoreTokensOf<T>() tokens with independent accumulators. Each
// s[t] sums over c in order whatever the pass size.
template <class T, int32_t kD, int32_t kT>
inline void ScoreQueryLanes(const float* qt, const float* kp, typename T::V* s) {
  constexpr int32_t kL = T::kLanes;
  constexpr int32_t kPass = ScoreTokensOf<T>() < kT ? ScoreTokensOf<T>() : kT;
  static_assert(kT % kPass == 0, "passes tile the piece");
  for (int32_t t0 = 0; t0 < kT; t0 += kPass) {
    typename T::V* st = s + t0;
    const float* kt = kp + t0 * kD;
#pragma GCC unroll 16
    for (int32_t t = 0; t < kPass; ++t) st[t] = T::Zero();
    for (int32_t c = 0; c < kD; ++c) {
      const typename T::V qv = T::Load(qt + c * kL);
#pragma GCC unroll 16
      for (int32_t t = 0; t < kPass; ++t) st[t] = T::Fma(qv, T::Set1(kt[t * kD + c]), st[t]);
    }
  }
}

// REQUIRES: T::kLanes == kPieceTokens, a.num_queries <= T::kLanes, a.head_dim == kD, the range
// shorter than 2^24 tokens (token offsets are compared as exact floats).
template <class T, class E, int32_t kD>
void AttendTileQueryLanes(const TileArgs& a) {
  using S = typename E::Storage;
  using V = typename T::V;
  constexpr int32_t kL = T::kLanes;
  constexpr int32_t kP = kPieceTokens;
  static_assert(kL == kP, "one score vector per token holds every query of the tile");
  const int32_t nq = a.num_queries;
  const int64_t bs = a.block_size;
  float* const qt = a.scratch;              // [kD][kL] scaled queries, lane = query
  float* const acc = qt + kD * kL;          // [nq][kD] unnormalised outputs
  float* const p = acc + int64_t{nq} * kD;  // [kP][kL] weights, token-major
  float* const kf = p + kP * kL;            // [kP][kD] K rows as f32 (converted or padded)

  float limit[kL];  // lane i sees the range's tokens below token_begin + limit[i]
  int64_t end = a.token_begin;
  for (int32_t i = 0; i < kL; ++i) {
    int64_t visible = a.token_begin;
    if (i < nq) {
      visible = a.visible[i] < a.token_end ? a.visible[i] : a.token_end;
      if (visible < a.token_begin) visible = a.token_begin;
      for (int32_t c = 0; c < kD; ++c) qt[c * kL + i] = a.q[i][c] * a.scale;
    } else {
      for (int32_t c = 0; c < kD; ++c) qt[c * kL + i] = 0.f;
    }
    limit[i] = static_cast<float>(visible - a.token_begin);
    if (visible > end) end = visible;
  }
  for (int64_t e = 0; e < int64_t{nq} * kD; ++e) acc[e] = 0.f;
  const V limits = T::Load(limit);
  // The running max starts at a finite floor, so e^(x − m) is never e^(−inf + inf): a lane that
  // has seen nothing keeps weights 0 and l = 0.
  V m = T::Set1(-1e30f);
  V l = T::Zero();

  const int64_t row_elems = bs * kD;
  for (int64_t j = a.token_begin; j < end;) {
    const int64_t b = j / bs;
    const int64_t off = j - b * bs;
    int64_t len = bs - off;
    if (end - j < len) len = end - j;
    if (len > kP) len = kP;
    const int32_t n = static_cast<int32_t>(len);
    const S* k = reinterpret_cast<const S*>(a.kv_base + a.block_ids[b] * a.block_bytes) + off * kD;
    const S* v = k + row_elems;
    // Scores are computed for the piece's n tokens rounded up to 4, 8 or 16 (short pieces: small
    // blocks, the end of a range), from K rows as f32 at a fixed stride: straight from the pool
    // when they are f32 and fill the rounded count, else converted, rows past n zeroed (their
    // scores are masked below).
    const int32_t rounded = n <= 4 ? 4 : n <= 8 ? 8 : kP;
    const float* kp = kf;
    if constexpr (std::is_same_v<E, KvF32>) {
      if (n == rounded) kp = k;
    }
    if (kp == kf) {
      for (int32_t t = 0; t < rounded; ++t) {
        for (int32_t c = 0; c < kD; c += kL) {
          T::Store(kf + t * kD + c, t < n ? T::LoadKv(k + int64_t{t} * kD + c, E{}) : T::Zero());
        }
      }
    }
    V s[kP];
    if (rounded == 4) {
      ScoreQueryLanes<T, kD, 4>(qt, kp, s);
    } else if (rounded == 8) {
      ScoreQueryLanes<T, kD, 8>(qt, kp, s);
    } else {
      ScoreQueryLanes<T, kD, kP>(qt, kp, s);
    }

    const float rel = static_cast<float>(j - a.token_begin);
    V piece_max = T::Set1(-INFINITY);
#pragma GCC unroll 16
    for (int32_t t = 0; t < kP; ++t) {
      s[t] = t < n ? T::MaskFrom(s[t], limits, rel + static_cast<float>(t)) : T::Set1(-INFINITY);
      piece_max = T::Max(piece_max, s[t]);
    }
    const V m_new = T::Max(m, piece_max);
    const V corr = T::Exp(T::Sub(m, m_new));
    V sum = T::Zero();
#pragma GCC unroll 16
    for (int32_t t = 0; t < kP; ++t) {
      if (t < n) {
        const V e = T::Exp(T::Sub(s[t], m_new));
        T::Store(p + t * kL, e);
        sum = T::Add(sum, e);
      }
    }
    l = T::Add(T::Mul(l, corr), sum);
    m = m_new;
    float scale[kL];
    T::Store(scale, corr);
    for (int32_t i = 0; i < nq; ++i) {
      if (scale[i] == 1.f) continue;  // e^0: this query's max did not grow
      const V cv = T::Set1(scale[i]);
      float* ai = acc + int64_t{i} * kD;
      for (int32_t c = 0; c < kD; c += kL) T::Store(ai + c, T::Mul(T::Load(ai + c), cv));
    }

    AccumulateAll<typename NarrowOf<T>::type, E>(p, WeightStrides{1, kL}, nq, kD, v, n, acc,
                                                 nullptr);
    j += len;
  }

  float ls[kL], ms[kL];
  T::Store(ls, l);
  T::Store(ms, m);
  for (int32_t i = 0; i < nq; ++i) {
    float* o = a.out[i];
    const float* ai = acc + int64_t{i} * kD;
    if (ls[i] == 0.f) {
      for (int32_t c = 0; c < kD; c += kL) T::Store(o + c, T::Zero());
      *a.lse[i] = -INFINITY;
      continue;
    }
    const V inv = T::Set1(1.f / ls[i]);
    for (int32_t c = 0; c < kD; c += kL) T::Store(o + c, T::Mul(T::Load(ai + c), inv));
    *a.lse[i] = ms[i] + logf(ls[i]);
  }
}

// The traits of T's query-lanes path: T itself when its vectors hold a piece, else T::QueryLanes
// (void: none).
template <class T>
struct QueryLanesOf {
  using type = std::conditional_t<T::kLanes == kPieceTokens, T, void>;
};
template <class T>
requires requires { typename T::QueryLanes; }
struct QueryLanesOf<T> {
  using type = typename T::QueryLanes;
};

template <class T, class E>
void AttendTileTyped(const TileArgs& a) {
  using Q = typename QueryLanesOf<T>::type;
  if constexpr (!std::is_void_v<Q>) {
    const bool query_lanes = a.num_queries >= kQueryLanesMinQueries && a.num_queries <= Q::kLanes &&
                             a.token_end - a.token_begin < (int64_t{1} << 24);
    if (query_lanes && a.head_dim == 64) return AttendTileQueryLanes<Q, E, 64>(a);
    if (query_lanes && a.head_dim == 128) return AttendTileQueryLanes<Q, E, 128>(a);
  }
  AttendTileKeyLanes<T, E>(a);
}

template <class T>
void AttendTileImpl(const TileArgs& a) {
  switch (a.dtype) {
    case KvDType::kF32:
      AttendTileTyped<T, KvF32>(a);
      return;
    case KvDType::kF16:
      AttendTileTyped<T, KvF16>(a);
      return;
    case KvDType::kBF16:
      AttendTileTyped<T, KvBF16>(a);
      return;
  }
}

}  // namespace tandem::attention_cpu
