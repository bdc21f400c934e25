#include "model/guided_sampling.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/tokenizer.h"

namespace tandem {

std::shared_ptr<GrammarCache> MakeGrammarCache(const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return nullptr;
  return std::make_shared<GrammarCache>(Vocabulary::FromTokenizer(*tokenizer));
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileRequestGrammar(
    GrammarCache* cache, std::string_view gbnf) {
  if (cache == nullptr) {
    return absl::FailedPreconditionError(
        "sampling.grammar: this node has no vocabulary to compile grammars against (the model "
        "has no tokenizer)");
  }
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> grammar =
      cache->Get(GrammarKind::kGbnf, gbnf);
  if (!grammar.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.grammar: ", grammar.status().message()));
  }
  return grammar;
}

absl::StatusOr<GuidedDecoder> GuidedDecoder::Create(std::shared_ptr<const CompiledGrammar> grammar,
                                                    absl::Span<const int32_t> generated,
                                                    std::vector<int32_t> stop_ids) {
  GuidedDecoder decoder(GrammarMatcher(std::move(grammar)), std::move(stop_ids));
  for (size_t i = 0; i < generated.size(); ++i) {
    if (decoder.IsStop(generated[i]) || !decoder.matcher_.Accept(generated[i]).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("grammar: generated token ", i, " (id ", generated[i],
                       ") is not allowed by the request's grammar; cannot resume it"));
    }
  }
  return decoder;
}

bool GuidedDecoder::IsStop(int32_t token) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end();
}

bool GuidedDecoder::IsAllowed(int32_t token) const {
  return IsStop(token) ? matcher_.CanTerminate() : matcher_.IsAllowed(token);
}

void GuidedDecoder::Mask(absl::Span<const float> logits, std::vector<float>* out) {
  ++stats_.full_masks;
  matcher_.FillAllowedMask(&bits_);
  if (matcher_.CanTerminate()) {
    for (const int32_t id : stop_ids_) {
      if (id >= 0 && static_cast<size_t>(id >> 6) < bits_.size()) {
        bits_[id >> 6] |= uint64_t{1} << (id & 63);
      }
    }
  }
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  out->assign(logits.size(), kNegInf);
  const size_t n = std::min(logits.size(), bits_.size() * 64);
  for (size_t w = 0; w * 64 < n; ++w) {
    uint64_t word = bits_[w];
    while (word != 0) {
      const size_t t = w * 64 + static_cast<size_t>(__builtin_ctzll(word));
      word &= word - 1;
      if (t < n) (*out)[t] = logits[t];
    }
  }
}

int32_t GuidedDecoder::Sample(absl::Span<const float> logits, const SamplingParams& params,
                              uint64_t step, const TokenHistory* history) {
  ++stats_.draws;
  const bool greedy = params.temperature == 0.f || params.top_k == 1;
  if (greedy) {
    const int32_t token = SampleToken(logits, params, step, history);
    if (IsAllowed(token)) return token;
  }
  Mask(logits, &masked_);
  const int32_t token = SampleToken(masked_, params, step, history);
  if (masked_[token] != -std::numeric_limits<float>::infinity() && IsAllowed(token)) return token;
  // Every allowed token's processed logit is -inf (min_tokens suppressing the only stop id
  // allowed, say): the lowest allowed id, else none.
  for (size_t t = 0; t < masked_.size(); ++t) {
    if (masked_[t] != -std::numeric_limits<float>::infinity() &&
        IsAllowed(static_cast<int32_t>(t))) {
      return static_cast<int32_t>(t);
    }
  }
  return -1;
}

absl::Status GuidedDecoder::Accept(int32_t token) {
  if (IsStop(token)) return absl::OkStatus();
  return matcher_.Accept(token);
}

}  // namespace tandem
