#include "attention/lse_merge.h"

#include <cmath>
#include <limits>

namespace tandem {

void MergeAttentionPartials(int32_t n, const float* const* outs, const float* const* lses,
                            int64_t items, int32_t head_dim, float* out, float* lse_out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t it = 0; it < items; ++it) {
    float m = kNegInf;
    for (int32_t i = 0; i < n; ++i) m = std::max(m, lses[i][it]);
    float* o = out + it * head_dim;
    for (int32_t d = 0; d < head_dim; ++d) o[d] = 0.f;
    if (m == kNegInf) {
      if (lse_out != nullptr) lse_out[it] = kNegInf;
      continue;
    }
    float s = 0.f;
    for (int32_t i = 0; i < n; ++i) {
      if (lses[i][it] != kNegInf) s += std::exp(lses[i][it] - m);
    }
    const float merged = m + std::log(s);
    for (int32_t i = 0; i < n; ++i) {
      if (lses[i][it] == kNegInf) continue;
      const float w = std::exp(lses[i][it] - merged);
      const float* oi = outs[i] + it * head_dim;
      for (int32_t d = 0; d < head_dim; ++d) o[d] += w * oi[d];
    }
    if (lse_out != nullptr) lse_out[it] = merged;
  }
}

void CorrectPartialInPlace(int32_t n, int32_t me, const float* all_lse, int64_t items,
                           int32_t head_dim, float* out, float* merged_lse) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t it = 0; it < items; ++it) {
    const float merged = MergeLse(all_lse + it, n, items);
    const float mine = all_lse[me * items + it];
    float* o = out + it * head_dim;
    if (mine == kNegInf) {
      for (int32_t d = 0; d < head_dim; ++d) o[d] = 0.f;
    } else {
      const float w = std::exp(mine - merged);
      for (int32_t d = 0; d < head_dim; ++d) o[d] *= w;
    }
    if (merged_lse != nullptr) merged_lse[it] = merged;
  }
}

}  // namespace tandem
