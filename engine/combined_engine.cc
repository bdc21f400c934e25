#include "engine/combined_engine.h"

#include "absl/synchronization/notification.h"
#include "common/request_checks.h"
#include "common/status_macros.h"

namespace tandem {

CombinedEngine::CombinedEngine(Instance* instance, const PrefillOptions& prefill,
                               const DecodeOptions& decode)
    : instance_(instance),
      blocks_(instance->num_blocks()),
      decode_(std::make_unique<DecodeEngine>(instance, &blocks_, decode)),
      prefill_(std::make_unique<PrefillEngine>(instance, &blocks_, prefill)) {}

bool CombinedEngine::Cancel(const std::string& id) {
  const bool a = prefill_->Cancel(id);
  const bool b = decode_->Cancel(id);
  return a || b;
}

absl::Status CombinedEngine::Generate(GenerateRequest request,
                                      std::function<void(int32_t)> on_token,
                                      std::function<void(absl::StatusOr<GenerateResult>)> on_done) {
  TANDEM_RETURN_IF_ERROR(CheckTokenBudget(request.max_new_tokens, "max_new_tokens"));
  struct State {
    GenerateRequest request;
    std::function<void(int32_t)> on_token;
    std::function<void(absl::StatusOr<GenerateResult>)> on_done;
    GenerateResult result;
  };
  auto st = std::make_shared<State>();
  st->on_token = std::move(on_token);
  st->on_done = std::move(on_done);
  PrefillJob pr;
  pr.id = request.id;
  pr.prompt = request.prompt;
  pr.sampling = request.sampling;
  pr.reserve_tokens = request.max_new_tokens;
  pr.return_logits = request.return_logits;
  st->request = std::move(request);
  DecodeEngine* decode = decode_.get();
  return prefill_->Submit(std::move(pr), [st, decode](absl::StatusOr<PrefillResult> r) {
    if (!r.ok()) {
      st->on_done(r.status());
      return;
    }
    st->result.tokens.push_back(r->first_token);
    if (st->request.return_logits) st->result.logits.push_back(std::move(r->logits));
    const auto& stops = st->request.stop_ids;
    const bool first_is_stop = std::find(stops.begin(), stops.end(), r->first_token) != stops.end();
    if (first_is_stop)
      st->result.tokens.pop_back();
    else
      st->on_token(r->first_token);
    DecodeJob dr;
    dr.id = st->request.id;
    dr.prompt_len = r->num_tokens;
    dr.first_token = r->first_token;
    dr.block_table = std::move(r->block_table);
    dr.sampling = st->request.sampling;
    dr.max_new_tokens = st->request.max_new_tokens;
    dr.stop_ids = stops;
    dr.return_logits = st->request.return_logits;
    if (NeedsContext(dr.sampling)) dr.context = st->request.prompt;
    DecodeCallbacks cb;
    cb.on_token = [st](int32_t t) {
      st->result.tokens.push_back(t);
      st->on_token(t);
    };
    cb.on_logits = [st](const std::vector<float>& l) { st->result.logits.push_back(l); };
    cb.on_done = [st](absl::Status s, FinishReason reason, int32_t) {
      if (!s.ok()) {
        st->on_done(s);
        return;
      }
      st->result.reason = reason;
      st->on_done(std::move(st->result));
    };
    if (absl::Status s = decode->Add(std::move(dr), std::move(cb)); !s.ok()) st->on_done(s);
  });
}

absl::StatusOr<GenerateResult> CombinedEngine::GenerateBlocking(GenerateRequest request,
                                                                absl::Duration timeout) {
  struct Wait {
    absl::Notification done;
    absl::StatusOr<GenerateResult> result = absl::UnknownError("not finished");
  };
  auto w = std::make_shared<Wait>();
  const std::string id = request.id;
  absl::Status s = Generate(
      std::move(request), [](int32_t) {},
      [w](absl::StatusOr<GenerateResult> r) {
        w->result = std::move(r);
        w->done.Notify();
      });
  if (!s.ok()) return s;
  if (!w->done.WaitForNotificationWithTimeout(timeout)) {
    Cancel(id);
    return absl::DeadlineExceededError("generation did not finish in time");
  }
  return std::move(w->result);
}

}  // namespace tandem
