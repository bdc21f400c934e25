#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>

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

// Ranks `ids` by logit (ties: lower id first) a chunk at a time: Next() sorts and returns the
// next most likely ids, so a draw that ends among the likeliest tokens — nearly every draw —
// never sorts the whole vocabulary, and the order it walks is exactly a full sort's.
class RankedChunks {
 public:
  RankedChunks(absl::Span<const float> logits, std::vector<int32_t> ids)
      : logits_(logits), ids_(std::move(ids)) {}

  absl::Span<const int32_t> Next() {
    const size_t begin = done_;
    const size_t end = std::min(ids_.size(), begin + chunk_);
    const auto by_logit = [this](int32_t a, int32_t b) {
      return logits_[a] > logits_[b] || (logits_[a] == logits_[b] && a < b);
    };
    if (end < ids_.size()) {
      std::nth_element(ids_.begin() + begin, ids_.begin() + end, ids_.end(), by_logit);
    }
    std::sort(ids_.begin() + begin, ids_.begin() + end, by_logit);
    done_ = end;
    chunk_ *= 4;  // a flat distribution reaches a full sort's cost in a few chunks
    return absl::MakeConstSpan(ids_).subspan(begin, end - begin);
  }

 private:
  absl::Span<const float> logits_;
  std::vector<int32_t> ids_;
  size_t done_ = 0;
  size_t chunk_ = 64;
};

// Steps 5-8 on processed logits. Candidates are walked in rank order (logit descending, ties:
// lower id first): min_p keeps weights >= min_p (probability >= min_p * the largest; a prefix of
// the ranking), top_k the first k, top_p the shortest prefix whose mass reaches it; the draw is
// the first candidate whose cumulative weight passes u * total.
int32_t Draw(absl::Span<const float> logits, const SamplingParams& params, uint64_t step) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  int32_t top = 0;
  for (int32_t v = 1; v < vocab; ++v) {
    if (logits[v] > logits[top]) top = v;
  }
  const double max_logit = logits[top];
  if (!std::isfinite(max_logit)) return top;
  // Weights proportional to softmax(logits / T); the top token's is 1.
  auto weight_of = [&](int32_t v) {
    return std::exp((logits[v] - max_logit) / params.temperature);
  };
  auto kept = [&](int32_t v, double w) { return v == top || (w > 0.0 && w >= params.min_p); };
  std::vector<double> weight(vocab);
  std::vector<int32_t> order;  // the candidates in rank order, as far as needed so far
  size_t limit;                // how many candidates there are
  double total = 0.0;          // their weight
  std::optional<RankedChunks> ranked;
  if (params.top_k > 0 && params.top_k < vocab) {
    // Only the first k can be drawn: rank them (a heap pass, cheapest for small k), weigh them,
    // cut where min_p does.
    order.resize(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + params.top_k, order.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                      });
    order.resize(params.top_k);
    limit = 0;
    for (; limit < order.size(); ++limit) {
      const int32_t v = order[limit];
      weight[v] = weight_of(v);
      if (!kept(v, weight[v])) break;
      total += weight[v];
    }
    order.resize(limit);
  } else {
    std::vector<int32_t> alive;
    alive.reserve(vocab);
    for (int32_t v = 0; v < vocab; ++v) {
      weight[v] = weight_of(v);
      if (kept(v, weight[v])) {
        alive.push_back(v);
        total += weight[v];
      }
    }
    limit = alive.size();
    ranked.emplace(logits, std::move(alive));
  }
  // Whether order[i] exists, ranking another chunk when needed; false past the limit.
  auto has = [&](size_t i) {
    while (order.size() <= i && order.size() < limit) {
      const absl::Span<const int32_t> chunk = ranked->Next();
      order.insert(order.end(), chunk.begin(), chunk.end());
    }
    return i < order.size();
  };
  size_t keep = limit;
  if (params.top_p < 1.f) {
    double mass = 0.0;
    for (size_t i = 0; has(i); ++i) {
      mass += weight[order[i]] / total;
      if (mass >= params.top_p) {
        keep = i + 1;
        break;
      }
    }
    total = 0.0;
    for (size_t i = 0; i < keep; ++i) total += weight[order[i]];
  }
  const double u = CounterUniform(params.seed, step) * total;
  double acc = 0.0;
  size_t i = 0;
  for (; i < keep && has(i); ++i) {
    acc += weight[order[i]];
    if (u < acc) return order[i];
  }
  return order[i - 1];
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
