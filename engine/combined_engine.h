// The single-instance baseline: prefill then decode on one instance, no KV transfer. The prompt's
// blocks are allocated with room for max_new_tokens, prefilled by a PrefillEngine, then handed to
// a DecodeEngine on the same instance (same pools, same block ids).
//
// Thread-safety: all public methods are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/block_manager.h"
#include "engine/decode_engine.h"
#include "engine/instance.h"
#include "engine/prefill_engine.h"

namespace tandem {

struct GenerateRequest {
  std::string id;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int32_t max_new_tokens = 16;
  std::vector<int32_t> stop_ids;
  bool return_logits = false;  // collect the logits of every generated token
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens (stop token excluded)
  FinishReason reason = FinishReason::kLength;
  std::vector<std::vector<float>> logits;  // when return_logits: one row per sampled token
};

class CombinedEngine {
 public:
  CombinedEngine(Instance* instance, const PrefillOptions& prefill, const DecodeOptions& decode);

  // Streams tokens through on_token; on_done is called once. Returns INVALID_ARGUMENT /
  // RESOURCE_EXHAUSTED for requests that can never run (callbacks then not called).
  absl::Status Generate(GenerateRequest request, std::function<void(int32_t token)> on_token,
                        std::function<void(absl::StatusOr<GenerateResult>)> on_done);

  // Generate and wait (at most `timeout`).
  absl::StatusOr<GenerateResult> GenerateBlocking(GenerateRequest request, absl::Duration timeout);

  BlockManager& blocks() { return blocks_; }
  bool Cancel(const std::string& id);

 private:
  Instance* const instance_;
  BlockManager blocks_;
  // Destroyed before blocks_ (declared after it): their destructors free blocks.
  std::unique_ptr<DecodeEngine> decode_;
  std::unique_ptr<PrefillEngine> prefill_;
};

}  // namespace tandem
