// Fuzz target: a Router.Generate request as it arrives over gRPC (serialized
// tandem.v1.GenerateRequest) through PrepareRequest — model name, prompt shape, budget, sampling,
// tokenisation (text, token ids or chat), ids and context fit — against a real vocabulary, plus
// the shared checks of common/request_checks.h that the prefill and decode nodes run, with the
// request's values and extreme limits. A request either prepares into something every later
// layer accepts, or fails with INVALID_ARGUMENT / NOT_FOUND.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "common/request_checks.h"
#include "google/protobuf/stubs/logging.h"
#include "router/request_prep.h"
#include "tandem/v1/router.pb.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_model.h"

namespace tandem {
namespace {

void NodeChecks(const v1::GenerateRequest& request) {
  const std::vector<int32_t> ids(request.token_ids().ids().begin(),
                                 request.token_ids().ids().end());
  const int64_t limit = static_cast<int64_t>(request.sampling().seed());
  for (int32_t vocab : {0, 1, fuzz::kFuzzVocab, std::numeric_limits<int32_t>::max()}) {
    (void)CheckTokenIds(ids, vocab, "prompt");
    for (int32_t id : ids) (void)CheckTokenId(id, vocab, "first token");
  }
  for (int64_t min : {int64_t{0}, int64_t{1}}) {
    (void)CheckTokenBudget(request.max_tokens(), "max_new_tokens", min);
    (void)CheckTokenBudget(limit, "reserve_tokens", min);
  }
  for (int64_t context :
       {int64_t{0}, int64_t{-1}, fuzz::kFuzzContext, limit, std::numeric_limits<int64_t>::max()}) {
    (void)CheckContextFit(static_cast<int64_t>(ids.size()), request.max_tokens(), "max_new_tokens",
                          context);
    (void)CheckContextFit(limit, limit, "max_new_tokens", context);
  }
}

}  // namespace
}  // namespace tandem

// Parsing hostile bytes makes protobuf log every invalid UTF-8 string; the status is what counts.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  NodeChecks(request);
  const ServedModel& model = fuzz::FuzzServedModel();
  absl::StatusOr<PreparedRequest> prepared = PrepareRequest(model, request);
  if (!prepared.ok()) {
    TANDEM_FUZZ_CHECK(prepared.status().code() == absl::StatusCode::kInvalidArgument ||
                      prepared.status().code() == absl::StatusCode::kNotFound);
    return 0;
  }
  // What the router hands to the nodes passes the nodes' own checks.
  const ModelLimits& limits = model.limits();
  TANDEM_FUZZ_CHECK(CheckTokenIds(prepared->prompt, limits.vocab_size, "prompt").ok());
  TANDEM_FUZZ_CHECK(CheckTokenBudget(prepared->max_tokens, "max_new_tokens").ok());
  TANDEM_FUZZ_CHECK(CheckContextFit(static_cast<int64_t>(prepared->prompt.size()),
                                    prepared->max_tokens, "max_new_tokens", limits.context_length)
                        .ok());
  TANDEM_FUZZ_CHECK(ValidateSamplingParams(prepared->sampling).ok());
  return 0;
}
