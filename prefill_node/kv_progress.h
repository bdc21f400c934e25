// KvProgress: how far one pipelined prefill has got (docs/kv_transfer.md, "Pipelined transfer").
// The prefill engine's progress hook advances it after every chunk; the prefill's end finishes
// it with the first token, or fails it (prefill error, KV lease released or expired). WatchKv
// handlers wait on it. Monotonic: tokens_ready only grows; once done or failed it never changes.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "model/logprobs.h"

namespace tandem {

struct KvProgressSnapshot {
  int64_t tokens_ready = 0;
  bool done = false;  // finished: first_token is the sampled token
  int32_t first_token = 0;
  std::vector<uint32_t> kv_digests;  // with done: the KV digests (empty: digests off)
  // With done: first_token's log-probabilities, when the request asked for them.
  std::optional<TokenLogprobs> first_logprobs;
  absl::Status status;  // not OK: failed (final)

  bool final() const { return done || !status.ok(); }
  friend bool operator==(const KvProgressSnapshot&, const KvProgressSnapshot&) = default;
};

class KvProgress {
 public:
  // Ignored once final or when it would not grow.
  void Advance(int64_t tokens_ready);
  void Finish(int64_t num_tokens, int32_t first_token, std::vector<uint32_t> kv_digests = {},
              std::optional<TokenLogprobs> first_logprobs = std::nullopt);
  // Ignored once final. REQUIRES: !status.ok().
  void Fail(absl::Status status);

  KvProgressSnapshot Get() const;
  // The state once it differs from `seen` or is final, or after `timeout` or once `cancel`
  // (may be null) is cancelled, whatever it is.
  KvProgressSnapshot Await(const KvProgressSnapshot& seen, absl::Duration timeout,
                           const CancellationToken* cancel = nullptr) const;

 private:
  mutable absl::Mutex mu_;
  KvProgressSnapshot state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem
