#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "model/token_history.h"

namespace tandem {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

absl::Status OutOfRange(const char* field, const char* range, float got) {
  return absl::InvalidArgumentError(absl::StrCat(field, " must be ", range, " (got ", got, ")"));
}

// True when steps 1-3 (model/sampling.h) change anything for draw `step`.
bool ChangesLogits(const SamplingParams& p, uint64_t step) {
  const bool min_tokens_active =
      step < static_cast<uint64_t>(p.min_tokens) && !p.min_tokens_stop_ids.empty();
  return min_tokens_active || !p.logit_bias.empty() || UsesPenalties(p);
}

// Steps 5-8 on processed logits.
int32_t Draw(absl::Span<const float> logits, const SamplingParams& params, uint64_t step) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int32_t keep = vocab;
  if (params.top_k > 0 && params.top_k < vocab) {
    keep = params.top_k;
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), by_logit);
  } else {
    std::sort(ids.begin(), ids.end(), by_logit);
  }
  const double max_logit = logits[ids[0]];
  if (!std::isfinite(max_logit)) return ids[0];
  // Weights proportional to softmax(logits / T) over the candidates (sorted: ids[0] is the max,
  // weight 1). min_p keeps weights >= min_p (probability >= min_p * max probability), a prefix.
  std::vector<double> weights(keep);
  int32_t kept = 0;
  for (; kept < keep; ++kept) {
    const double w = std::exp((logits[ids[kept]] - max_logit) / params.temperature);
    if (w <= 0.0 || w < params.min_p) break;
    weights[kept] = w;
  }
  keep = std::max(kept, 1);
  double total = std::accumulate(weights.begin(), weights.begin() + keep, 0.0);
  // Nucleus: the smallest prefix whose mass reaches top_p.
  if (params.top_p < 1.f) {
    double mass = 0.0;
    for (int32_t i = 0; i < keep; ++i) {
      mass += weights[i] / total;
      if (mass >= params.top_p) {
        keep = i + 1;
        break;
      }
    }
    total = std::accumulate(weights.begin(), weights.begin() + keep, 0.0);
  }
  const double u = CounterUniform(params.seed, step) * total;
  double acc = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    acc += weights[i];
    if (u < acc) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(p.temperature >= 0.f) || !std::isfinite(p.temperature)) {
    return OutOfRange("temperature", "a finite number >= 0", p.temperature);
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0 (got ", p.top_k, ")"));
  }
  if (!(p.top_p > 0.f && p.top_p <= 1.f)) return OutOfRange("top_p", "in (0, 1]", p.top_p);
  if (!(p.min_p >= 0.f && p.min_p <= 1.f)) return OutOfRange("min_p", "in [0, 1]", p.min_p);
  if (!(p.repetition_penalty > 0.f) || !std::isfinite(p.repetition_penalty)) {
    return OutOfRange("repetition_penalty", "a finite number > 0", p.repetition_penalty);
  }
  if (!(p.presence_penalty >= -2.f && p.presence_penalty <= 2.f)) {
    return OutOfRange("presence_penalty", "in [-2, 2]", p.presence_penalty);
  }
  if (!(p.frequency_penalty >= -2.f && p.frequency_penalty <= 2.f)) {
    return OutOfRange("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias token id ", id, " is negative"));
    }
    if (!(bias >= -100.f && bias <= 100.f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias for token ", id, " must be in [-100, 100] (got ", bias, ")"));
    }
  }
  if (p.min_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_tokens must be >= 0 (got ", p.min_tokens, ")"));
  }
  for (const int32_t id : p.min_tokens_stop_ids) {
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("min_tokens_stop_ids token id ", id, " is negative"));
    }
  }
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs must be in [0, ", kMaxLogprobs, "] (got ", p.logprobs, ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateSamplingIds(const SamplingParams& p, int64_t vocab_size) {
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logit_bias token id ", id, " is out of vocabulary (size ", vocab_size, ")"));
    }
  }
  for (const int32_t id : p.min_tokens_stop_ids) {
    if (id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "min_tokens_stop_ids token id ", id, " is out of vocabulary (size ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

bool UsesPenalties(const SamplingParams& p) {
  return p.repetition_penalty != 1.f || p.presence_penalty != 0.f || p.frequency_penalty != 0.f;
}

bool NeedsContext(const SamplingParams& p) { return UsesPenalties(p) || !p.grammar.empty(); }

int32_t ArgMax(absl::Span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

std::vector<float> ProcessLogits(absl::Span<const float> logits, const SamplingParams& p,
                                 uint64_t step, const TokenHistory* history) {
  std::vector<float> out(logits.begin(), logits.end());
  if (step < static_cast<uint64_t>(p.min_tokens)) {
    for (const int32_t id : p.min_tokens_stop_ids) {
      out[id] = -std::numeric_limits<float>::infinity();
    }
  }
  for (const auto& [id, bias] : p.logit_bias) out[id] += bias;
  if (history == nullptr || !UsesPenalties(p)) return out;
  // Repetition: ids in the prompt or the output, each once (as vLLM's mask).
  if (p.repetition_penalty != 1.f) {
    const float inverse = 1.f / p.repetition_penalty;
    auto penalise = [&](int32_t id) { out[id] *= out[id] > 0.f ? inverse : p.repetition_penalty; };
    for (const int32_t id : history->prompt_ids()) penalise(id);
    for (const auto& [id, count] : history->output_counts()) {
      if (!history->prompt_ids().contains(id)) penalise(id);
    }
  }
  for (const auto& [id, count] : history->output_counts()) {
    out[id] -= p.frequency_penalty * static_cast<float>(count);
    out[id] -= p.presence_penalty;
  }
  return out;
}

double CounterUniform(uint64_t seed, uint64_t step) {
  const uint64_t bits = SplitMix64(SplitMix64(seed) ^ (step * 0xd1b54a32d192ed03ull));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

int32_t SampleToken(absl::Span<const float> logits, const SamplingParams& params, uint64_t step,
                    const TokenHistory* history) {
  const bool greedy = params.temperature == 0.f || params.top_k == 1;
  if (!ChangesLogits(params, step)) {
    return greedy ? ArgMax(logits) : Draw(logits, params, step);
  }
  const std::vector<float> processed = ProcessLogits(logits, params, step, history);
  return greedy ? ArgMax(processed) : Draw(processed, params, step);
}

}  // namespace tandem
