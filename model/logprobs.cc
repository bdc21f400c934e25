#include "model/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tandem {

TokenLogprobs ComputeLogprobs(absl::Span<const float> logits, int32_t token, int32_t top_n) {
  // log_softmax(x)_i = (x_i - max) - log(sum_j exp(x_j - max)): shifted first, so large logits
  // keep their precision.
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (const float l : logits) sum += std::exp(static_cast<double>(l) - max_logit);
  const double log_sum = std::log(sum);
  auto logprob = [&](int32_t id) {
    return static_cast<float>((static_cast<double>(logits[id]) - max_logit) - log_sum);
  };
  TokenLogprobs out;
  out.logprob = logprob(token);
  const int32_t n = std::min<int32_t>(top_n, static_cast<int32_t>(logits.size()));
  if (n == 0) return out;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out.top.reserve(n);
  for (int32_t i = 0; i < n; ++i) out.top.emplace_back(ids[i], logprob(ids[i]));
  return out;
}

}  // namespace tandem
