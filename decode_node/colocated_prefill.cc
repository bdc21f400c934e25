#include "decode_node/colocated_prefill.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/request_checks.h"
#include "common/status_macros.h"

namespace tandem {

ColocatedPrefill::ColocatedPrefill(Instance* instance, BlockManager* blocks, DecodeEngine* decode,
                                   const PrefillOptions& options)
    : decode_(decode),
      blocks_(blocks),
      engine_(std::make_unique<PrefillEngine>(instance, blocks, options)) {}

ColocatedPrefill::~ColocatedPrefill() { engine_.reset(); }

bool ColocatedPrefill::Cancel(const std::string& request_id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(request_id);
    if (it == pending_.end()) return false;
    // Seen by the prefill callback even when the prefill has just finished (no decode Add).
    it->second->cancelled = true;
  }
  engine_->Cancel(request_id);
  return true;
}

absl::Status ColocatedPrefill::Start(ColocatedCall call, DecodeSink sink) {
  TANDEM_RETURN_IF_ERROR(CheckTokenBudget(call.max_new_tokens, "max_new_tokens"));
  auto pending = std::make_shared<Pending>();
  {
    absl::MutexLock lock(&mu_);
    if (!pending_.emplace(call.request_id, pending).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("request ", call.request_id, " is already prefilling here"));
    }
  }
  PrefillJob pr;
  pr.id = call.request_id;
  pr.prompt = call.prompt;
  pr.sampling = call.sampling;
  pr.reserve_tokens = call.max_new_tokens;
  pr.sample_step = call.next_step - 1;
  auto shared_call = std::make_shared<ColocatedCall>(std::move(call));
  auto shared_sink = std::make_shared<DecodeSink>(std::move(sink));
  absl::Status submitted = engine_->Submit(
      std::move(pr),
      [this, pending, c = shared_call, s = shared_sink](absl::StatusOr<PrefillResult> r) {
        absl::MutexLock lock(&mu_);
        pending_.erase(c->request_id);
        if (!r.ok()) {  // the engine has freed the blocks
          s->on_done(r.status(), FinishReason::kError, 0);
          return;
        }
        if (pending->cancelled) {
          blocks_->Release(r->block_table);
          s->on_done(absl::CancelledError("decode cancelled"), FinishReason::kCancelled, 0);
          return;
        }
        const int32_t first = c->resume_token.value_or(r->first_token);
        if (!c->resume_token.has_value() && c->sampling.logprobs >= 0 && s->on_logprobs) {
          s->on_logprobs(r->first_logprobs);
        }
        s->on_token(first);
        DecodeJob dr;
        dr.id = c->request_id;
        dr.prompt_len = r->num_tokens;
        dr.first_token = first;
        dr.block_table = std::move(r->block_table);
        dr.sampling = c->sampling;
        dr.max_new_tokens = c->max_new_tokens;
        dr.stop_ids = c->stop_ids;
        dr.next_step = c->next_step;
        if (NeedsContext(dr.sampling)) dr.context = c->prompt;
        DecodeCallbacks cb;
        cb.on_token = s->on_token;
        cb.on_logprobs = s->on_logprobs;
        cb.on_done = s->on_done;
        // Under mu_, so a Cancel cannot fall between the prefill's end and the decode's start.
        // On error Add has not taken the blocks.
        std::vector<int32_t> table = dr.block_table;
        if (absl::Status added = decode_->Add(std::move(dr), std::move(cb)); !added.ok()) {
          blocks_->Release(table);
          s->on_done(added, FinishReason::kError, 1);
        }
      });
  if (!submitted.ok()) {
    absl::MutexLock lock(&mu_);
    pending_.erase(shared_call->request_id);
  }
  return submitted;
}

}  // namespace tandem
