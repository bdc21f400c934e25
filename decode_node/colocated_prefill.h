// Colocated prefill (tandem-decode --colocated_prefill=true): the decode instance prefills a
// prompt itself, on its own Instance, thread pool and KV pools, and hands the blocks to its
// DecodeEngine, as CombinedEngine does in-process: no prefill node, no KV transfer. The serving
// counterpart of CombinedEngine, for comparing colocated and disaggregated serving with the same
// engine (docs/architecture.md).
//
// Start prefills `prompt` (blocks for prompt + max_new_tokens, sampling draw next_step - 1),
// calls on_token with the first token (on a resume: the given first_token instead of the sampled
// one), then adds the request to the decode engine, which streams the rest and calls on_done
// once (a stop or length end right after the first token included). A prefill failure (queue
// timeout: RESOURCE_EXHAUSTED; cancelled: CANCELLED) reaches on_done without a token.
//
// Cancel works in either phase: a request whose prefill has finished but which the decode
// engine has not taken yet is ended with CANCELLED instead of being added.
// Thread-safety: all public methods are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/finish_reason.h"
#include "decode_node/decode_sink.h"
#include "engine/block_manager.h"
#include "engine/decode_engine.h"
#include "engine/instance.h"
#include "engine/prefill_engine.h"

namespace tandem {

struct ColocatedCall {
  std::string request_id;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int32_t max_new_tokens = 1;  // first token included
  std::vector<int32_t> stop_ids;
  uint64_t next_step = 1;               // draw of the token after the first one
  std::optional<int32_t> resume_token;  // a resume: the first token, already streamed
};

class ColocatedPrefill {
 public:
  // `blocks` and `decode` belong to `instance`; all outlive this object.
  ColocatedPrefill(Instance* instance, BlockManager* blocks, DecodeEngine* decode,
                   const PrefillOptions& options);
  ~ColocatedPrefill();  // fails prefills in flight with UNAVAILABLE (their on_done is called)

  // INVALID_ARGUMENT for requests that can never run (empty prompt, bad ids or sampling values,
  // prompt + max_new_tokens beyond the context), RESOURCE_EXHAUSTED when they never fit the pool,
  // ALREADY_EXISTS for a request id already prefilling here; the sink is then not called.
  absl::Status Start(ColocatedCall call, DecodeSink sink);
  // True if the request was still prefilling or waiting to be handed to the decode engine.
  bool Cancel(const std::string& request_id);

  int32_t queued() const { return engine_->queued(); }
  int32_t running() const { return engine_->running(); }

 private:
  struct Pending {
    bool cancelled = false;
  };
  DecodeEngine* const decode_;
  BlockManager* const blocks_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Pending>> pending_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<PrefillEngine> engine_;  // last: destroyed first, its callbacks use mu_
};

}  // namespace tandem
