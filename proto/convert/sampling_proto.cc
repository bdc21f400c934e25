#include "proto/convert/sampling_proto.h"

#include <algorithm>

namespace tandem {

SamplingParams FromProto(const v1::SamplingParams& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.has_top_p() ? p.top_p() : 1.f;
  s.seed = p.seed();
  s.min_p = p.min_p();
  s.repetition_penalty = p.has_repetition_penalty() ? p.repetition_penalty() : 1.f;
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.logit_bias.assign(p.logit_bias().begin(), p.logit_bias().end());
  std::sort(s.logit_bias.begin(), s.logit_bias.end());  // a map's order is unspecified
  s.min_tokens = p.min_tokens();
  s.min_tokens_stop_ids.assign(p.min_tokens_stop_ids().begin(), p.min_tokens_stop_ids().end());
  s.logprobs = p.has_logprobs() ? p.logprobs() : -1;
  s.grammar = p.grammar();
  return s;
}

v1::SamplingParams ToProto(const SamplingParams& s) {
  v1::SamplingParams p;
  p.set_temperature(s.temperature);
  p.set_top_k(s.top_k);
  p.set_top_p(s.top_p);
  p.set_seed(s.seed);
  p.set_min_p(s.min_p);
  p.set_repetition_penalty(s.repetition_penalty);
  p.set_presence_penalty(s.presence_penalty);
  p.set_frequency_penalty(s.frequency_penalty);
  for (const auto& [id, bias] : s.logit_bias) (*p.mutable_logit_bias())[id] = bias;
  p.set_min_tokens(s.min_tokens);
  p.mutable_min_tokens_stop_ids()->Add(s.min_tokens_stop_ids.begin(), s.min_tokens_stop_ids.end());
  if (s.logprobs >= 0) p.set_logprobs(s.logprobs);
  p.set_grammar(s.grammar);
  return p;
}

v1::TokenLogprobs ToProto(const TokenLogprobs& l) {
  v1::TokenLogprobs p;
  p.set_logprob(l.logprob);
  for (const auto& [id, logprob] : l.top) {
    p.add_top_ids(id);
    p.add_top_logprobs(logprob);
  }
  return p;
}

TokenLogprobs FromProto(const v1::TokenLogprobs& p) {
  TokenLogprobs l;
  l.logprob = p.logprob();
  const int n = std::min(p.top_ids_size(), p.top_logprobs_size());
  for (int i = 0; i < n; ++i) l.top.emplace_back(p.top_ids(i), p.top_logprobs(i));
  return l;
}

}  // namespace tandem
