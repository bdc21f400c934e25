#include "router/http/openai_logprobs.h"

#include <cmath>
#include <limits>

namespace tandem {
namespace {

using Json = nlohmann::json;

int64_t CodePoints(const std::string& text) {
  int64_t n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// JSON has no -inf: a token the model gives probability 0 gets the lowest float, as a number.
double Finite(float logprob) {
  return std::isfinite(logprob) ? logprob : std::numeric_limits<float>::lowest();
}

}  // namespace

LogprobsBuilder::LogprobsBuilder(OpenAiEndpoint endpoint, const Tokenizer& tokenizer)
    : endpoint_(endpoint), tokenizer_(tokenizer), current_(Empty()) {}

Json LogprobsBuilder::Empty() const {
  if (endpoint_ == OpenAiEndpoint::kChatCompletions) return Json{{"content", Json::array()}};
  return Json{{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
}

void LogprobsBuilder::Add(int32_t id, const TokenLogprobs& logprobs, const std::string& text) {
  auto token_string = [&](int32_t t) { return tokenizer_.Decode({t}); };
  auto token_bytes = [&](int32_t t) {
    Json bytes = Json::array();
    for (const char c : tokenizer_.TokenBytes(t)) bytes.push_back(static_cast<unsigned char>(c));
    return bytes;
  };
  if (endpoint_ == OpenAiEndpoint::kChatCompletions) {
    Json top = Json::array();
    for (const auto& [t, lp] : logprobs.top) {
      top.push_back(
          Json{{"token", token_string(t)}, {"logprob", Finite(lp)}, {"bytes", token_bytes(t)}});
    }
    current_["content"].push_back(Json{{"token", token_string(id)},
                                       {"logprob", Finite(logprobs.logprob)},
                                       {"bytes", token_bytes(id)},
                                       {"top_logprobs", top}});
  } else {
    Json top = Json::object();
    for (const auto& [t, lp] : logprobs.top) top[token_string(t)] = Finite(lp);
    current_["tokens"].push_back(token_string(id));
    current_["token_logprobs"].push_back(Finite(logprobs.logprob));
    current_["top_logprobs"].push_back(top);
    current_["text_offset"].push_back(text_offset_);
  }
  text_offset_ += CodePoints(text);
  ++count_;
}

Json LogprobsBuilder::Take() {
  Json out = std::move(current_);
  current_ = Empty();
  count_ = 0;
  return out;
}

}  // namespace tandem
