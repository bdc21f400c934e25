// DecodeNode::Admit: a Decode call's sequences join the engine once its KV is in the pools — one,
// or the n choices of an n > 1 call sharing the pulled prompt blocks (engine/choice_blocks.h).
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/request_checks.h"
#include "common/status_macros.h"
#include "decode_node/decode_node.h"
#include "engine/choice_blocks.h"

namespace tandem {

absl::Status CheckDecodeChoices(const DecodeCall& call, int32_t vocab_size) {
  if (call.choices.empty()) return absl::OkStatus();
  if (call.pipelined) {
    return absl::InvalidArgumentError(
        "choices need their first tokens in the call: not with pipelined");
  }
  TANDEM_RETURN_IF_ERROR(CheckChoices(static_cast<int64_t>(call.choices.size())));
  absl::flat_hash_set<int32_t> seen;
  for (const DecodeChoice& c : call.choices) {
    if (c.index < 0 || c.index >= kMaxChoices || !seen.insert(c.index).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("choice index ", c.index, " is repeated or outside [0, ", kMaxChoices, ")"));
    }
    TANDEM_RETURN_IF_ERROR(CheckTokenId(c.first_token, vocab_size,
                                        absl::StrCat("choice ", c.index, "'s first token")));
  }
  return absl::OkStatus();
}

absl::Status DecodeNode::Admit(const DecodeCall& call, std::vector<int32_t> allocated,
                               int64_t per_choice, int32_t first_token,
                               const std::optional<TokenLogprobs>& first_logprobs,
                               std::vector<DecodeSink> sinks) {
  const KvHandle& kv = call.kv;
  const int32_t n = static_cast<int32_t>(sinks.size());
  absl::StatusOr<ChoiceTables> forked =
      ForkChoiceTables(*blocks_, allocated, per_choice, kv.num_tokens,
                       VirtualBlockTokens(options_.instance.parallel.dcp_geometry()), n);
  if (!forked.ok()) {
    blocks_->Release(allocated);
    return forked.status();
  }
  // From here each table holds its own references: those not handed to the engine are freed.
  int32_t added = 0;
  auto release_rest = [&] {
    for (int32_t i = added; i < n; ++i) blocks_->Release(forked->tables[i]);
  };
  // Each further choice's copy of the partial last prompt block, before any step writes there.
  if (absl::Status s = instance_->CopyBlocks(forked->copies); !s.ok()) {
    release_rest();
    return s;
  }
  for (int32_t i = 0; i < n; ++i) {
    DecodeSink& sink = sinks[i];
    DecodeJob req;
    req.id = call.request_id;
    req.prompt_len = kv.num_tokens;
    req.first_token = call.choices.empty() ? first_token : call.choices[i].first_token;
    req.block_table = std::move(forked->tables[i]);
    req.sampling = call.sampling;
    if (!call.choices.empty()) {
      req.sampling.seed = call.sampling.seed + static_cast<uint64_t>(call.choices[i].index);
    }
    req.max_new_tokens = call.max_new_tokens;
    req.stop_ids = call.stop_ids;
    req.next_step = call.next_step;
    if (NeedsContext(call.sampling)) req.context = call.context_ids;
    // Pipelined: the prefill's first token goes to the sink before any token the engine
    // generates (the service writes what the sink got only once Start has returned OK).
    std::function<void(int32_t)> on_token = std::move(sink.on_token);
    DecodeCallbacks cb;
    cb.on_token = on_token;
    cb.on_logprobs = std::move(sink.on_logprobs);
    cb.on_done = std::move(sink.on_done);
    if (call.pipelined) {
      if (first_logprobs.has_value() && cb.on_logprobs) cb.on_logprobs(*first_logprobs);
      on_token(req.first_token);
    }
    // A refused request leaves its blocks (forked->tables[i], moved into req) to us.
    std::vector<int32_t> table = req.block_table;
    if (absl::Status s = engine_->Add(std::move(req), std::move(cb)); !s.ok()) {
      forked->tables[i] = std::move(table);
      // The choices already running end CANCELLED (their sinks are told) and free their blocks.
      if (added > 0) engine_->Cancel(call.request_id);
      release_rest();
      return s;
    }
    ++added;  // the engine frees the table when the choice ends
  }
  return absl::OkStatus();
}

}  // namespace tandem
