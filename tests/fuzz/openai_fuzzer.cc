// Fuzz target: the body of POST /v1/chat/completions or /v1/completions (the first input byte's
// low bit picks the endpoint; the rest is the body) through what the router's HTTP API does
// before it routes: PrepareOpenAiRequest (JSON parse, model and prompt checks, tokenisation,
// default budget, the GenerateRequest), then the router's PrepareRequest on that GenerateRequest
// (RunGenerate's first step), and the OpenAI error body a failure is answered with. The same body
// also goes through POST /tokenize and /detokenize (openai_tokenize.h).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "router/http/openai_prepare.h"
#include "router/http/openai_response.h"
#include "router/http/openai_tokenize.h"
#include "router/request_prep.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  if (size == 0) return 0;
  const OpenAiEndpoint endpoint =
      (data[0] & 1) != 0 ? OpenAiEndpoint::kCompletions : OpenAiEndpoint::kChatCompletions;
  const absl::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const ServedModel& model = fuzz::FuzzServedModel();
  for (auto* fn : {&Tokenize, &Detokenize}) {
    const absl::StatusOr<TokenizeAnswer> answer = fn(model, body);
    if (answer.ok()) {
      TANDEM_FUZZ_CHECK(!answer->body.empty());
    } else {
      TANDEM_FUZZ_CHECK(HttpStatusFor(answer.status().code()) / 100 == 4);
    }
  }
  absl::StatusOr<PreparedOpenAiRequest> prepared =
      PrepareOpenAiRequest(model, endpoint, body, "fuzz-request");
  if (!prepared.ok()) {
    TANDEM_FUZZ_CHECK(prepared.status().code() == absl::StatusCode::kInvalidArgument ||
                      prepared.status().code() == absl::StatusCode::kNotFound);
    TANDEM_FUZZ_CHECK(HttpStatusFor(prepared.status().code()) / 100 == 4);
    TANDEM_FUZZ_CHECK(!ErrorBody(prepared.status()).empty());
    return 0;
  }
  TANDEM_FUZZ_CHECK(prepared->prompt_tokens ==
                    static_cast<int32_t>(prepared->generate.prompt.token_ids.size()));
  absl::StatusOr<PreparedRequest> routed = PrepareRequest(model, prepared->generate);
  if (!routed.ok()) {
    TANDEM_FUZZ_CHECK(routed.status().code() == absl::StatusCode::kInvalidArgument ||
                      routed.status().code() == absl::StatusCode::kNotFound);
    TANDEM_FUZZ_CHECK(!ErrorBody(routed.status()).empty());
  }
  return 0;
}
