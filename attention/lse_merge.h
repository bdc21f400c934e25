// Exact merge of attention partials by log-sum-exp (docs/design.md#lse-merge). Pure.
//
// Each partial i holds, per (row, head) "item", an output o_i normalised over its own keys and
// its natural-log LSE L_i (−inf when it had no keys). The exact result is
//   m = max L_i (0 if all −inf);  L = m + log Σ exp(L_i − m);  O = Σ exp(L_i − L)·o_i.
// A partial with L_i = −inf contributes nothing, even if its output holds garbage or NaN.
// All −inf → O = 0, L = −inf.
//
// Layouts: outputs are [items][head_dim] floats, LSEs are [items] floats, item = row·heads + head.
#pragma once

#include <math.h>

#include <cstdint>

#include "attention/hd.h"

namespace tandem {

// Merged LSE of n values (stride between consecutive values: `stride` floats).
TANDEM_HD inline float MergeLse(const float* lse, int32_t n, int64_t stride);

// Standalone combine: writes the merged output (and LSE when lse_out != nullptr).
// outs[i] / lses[i] point at partial i. out may alias none of the inputs.
void MergeAttentionPartials(int32_t n, const float* const* outs, const float* const* lses,
                            int64_t items, int32_t head_dim, float* out, float* lse_out);

// The form used after an all-gather of LSEs: all_lse is [n][items] (partial i's LSEs at
// all_lse + i·items). Rescales partial `me` (out, [items][head_dim]) in place by exp(L_me − L),
// writing exact zeros where L_me = −inf, so that summing the corrected partials of all n ranks
// (an all-reduce or reduce-scatter with sum) yields the merged output. Writes the merged LSE to
// merged_lse when it is not null.
void CorrectPartialInPlace(int32_t n, int32_t me, const float* all_lse, int64_t items,
                           int32_t head_dim, float* out, float* merged_lse);

// ---- inline ----

TANDEM_HD inline float MergeLse(const float* lse, int32_t n, int64_t stride) {
  const float kNegInf = -INFINITY;
  float m = kNegInf;
  for (int32_t i = 0; i < n; ++i) {
    const float l = lse[i * stride];
    if (l > m) m = l;
  }
  if (m == kNegInf) return kNegInf;
  float s = 0.f;
  for (int32_t i = 0; i < n; ++i) {
    const float l = lse[i * stride];
    if (l != kNegInf) s += expf(l - m);
  }
  return m + logf(s);
}

}  // namespace tandem
