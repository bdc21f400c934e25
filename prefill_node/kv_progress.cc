#include "prefill_node/kv_progress.h"

#include <utility>

namespace tandem {

void KvProgress::Advance(int64_t tokens_ready) {
  absl::MutexLock lock(&mu_);
  if (state_.final() || tokens_ready <= state_.tokens_ready) return;
  state_.tokens_ready = tokens_ready;
}

void KvProgress::Finish(int64_t num_tokens, int32_t first_token, std::vector<uint32_t> kv_digests,
                        std::optional<TokenLogprobs> first_logprobs) {
  absl::MutexLock lock(&mu_);
  if (state_.final()) return;
  state_.tokens_ready = num_tokens;
  state_.first_token = first_token;
  state_.kv_digests = std::move(kv_digests);
  state_.first_logprobs = std::move(first_logprobs);
  state_.done = true;
}

void KvProgress::Fail(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (state_.final() || status.ok()) return;
  state_.status = std::move(status);
}

KvProgressSnapshot KvProgress::Get() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

KvProgressSnapshot KvProgress::Await(const KvProgressSnapshot& seen, absl::Duration timeout,
                                     const CancellationToken* cancel) const {
  // A cancel takes and drops mu_, so the wait looks at its condition again.
  CancelCallback wake;
  if (cancel != nullptr) wake = cancel->OnCancel([this] { absl::MutexLock touch(&mu_); });
  absl::MutexLock lock(&mu_);
  auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return state_.final() || !(state_ == seen) || (cancel != nullptr && cancel->cancelled());
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  return state_;
}

}  // namespace tandem
