// The per-request driver behind RunGenerate (generate_driver.h): private to the router, shared
// by generate_driver.cc (prefill, ReleaseKv, the run loop), generate_driver_decode.cc (the plain
// and colocated Decode calls and what their failures mean), generate_driver_pipelined.cc
// (pipelined transfer) and generate_driver_choices.cc (n > 1). Every Decode call is run by
// RunDecodeCall (decode_call.h). Not for use outside those files.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "model/tokenizer/streaming_decoder.h"
#include "router/clock.h"
#include "router/decode_call.h"
#include "router/generate_driver.h"
#include "router/grpc_node_client.h"
#include "router/node_client.h"
#include "router/prefix_match.h"
#include "router/provenance.h"
#include "router/request_prep.h"
#include "router/request_state.h"
#include "tandem/v1/prefill.pb.h"

namespace tandem::generate_internal {

// The KV a prefill node holds for this request, and how to reach that node to release it.
struct HeldKv {
  v1::KvHandle handle;
  NodeRef node;
};

// LayoutName of a layout as it crosses the wire (a KV handle's, a DecodeServed's).
std::string LayoutNameOf(const v1::KvLayout& layout);

// Longest wait for a healthy node before the pick is tried again: a bound, not a poll interval
// (NodePool::AwaitHealthy wakes at once when a poll finds a node healthy, and on cancellation).
constexpr absl::Duration kWaitSlice = absl::Milliseconds(100);

class Driver {
 public:
  Driver(const RouterDeps& deps, absl::Time client_deadline, const CancellationToken& cancel,
         GenerateSink* sink)
      : deps_(deps),
        client_deadline_(client_deadline),
        cancel_(cancel),
        sink_(sink),
        nodes_(deps.nodes != nullptr ? deps.nodes : DefaultGrpcNodeClient()),
        clock_(deps.clock != nullptr ? deps.clock : RealClock()),
        start_(clock_->Now()) {}

  // `refused`: not OK when the request must be refused as it is (a field this router does not
  // know), after its id is assigned.
  grpc::Status Run(const GenerateInput& request, const absl::Status& refused);

 private:
  // `pipelined` (RouterOptions::pipelined_transfer, not on a resume): the Prefill call asks for an
  // early handle and, when the node gives one, PipelinedDecode takes over at once.
  void Prefill(RequestState& state, bool pipelined);
  void Decode(RequestState& state);
  // Pipelined transfer: a Decode call with the early handle kv_, sent while the prefill runs, and a
  // WatchKv call to the prefill node, so the first token is streamed the moment the prefill
  // samples it (else from the decode's first event, which repeats it once the last chunk has
  // landed). A failure before the first token counts as a prefill failure (kv_ released — which
  // cancels the prefill if it still runs — and the request prefilled again, avoiding the node
  // blamed), after it as a decode failure (resume). Leaves the phase at kPrefill (retry or
  // resume), kDone or kFailed.
  void PipelinedDecode(RequestState& state);
  // Colocated serving (RouterOptions::colocated): one Decode call with the prompt does the
  // prefill and the decode on one node. Its first event is the prefill's token (on a resume the
  // known g[k-1]); a failure before it counts as a prefill failure, after it as a decode failure
  // (the request resumes with another colocated call). Leaves the phase at kPrefill (retry or
  // resume), kDone or kFailed.
  void Colocated(RequestState& state);
  // Handles one decode event; false when the call is over for this request.
  bool OnDecodeEvent(RequestState& state, const v1::DecodeEvent& event);
  // OnDecodeEvent as the call's next step: read on, collect the finish, or stop the call.
  CallStep DecodeStep(RequestState& state, const v1::DecodeEvent& event);
  // The Decode call to `node` with `request`: its deadline min(client deadline, now +
  // rpc_timeout + idle · (max_new_tokens + 1)), the idle timeout, the request id.
  DecodeCallSpec DecodeCallTo(const NodeLease& node, v1::DecodeRequest request,
                              int32_t max_new_tokens) const;
  // Runs `spec` with `hooks` (RunDecodeCall), recording every event's DecodeServed first.
  DecodeCallResult RunDecode(DecodeCallSpec spec, DecodeCallHooks hooks);
  // A Decode call of one sequence (`call`: plain, colocated or pipelined) on `node` ended with
  // `failure`. A client's cancellation fails the request (a pipelined call's KV released). Else
  // RequestState::JudgeDecodeCallFailure says what it means (retry or resume, as a prefill or a
  // decode failure); this applies it: whom to blame, strict mode, the KV, the state's next phase.
  void OnDecodeCallFailed(RequestState& state, const std::string& node, absl::Status failure,
                          NodeCall call);
  void ReleaseKv();
  // A healthy node of `role`; when none is, waits for one (bounded by the client's deadline and
  // the retry policy's wait budget, interrupted by cancellation) instead of failing at once.
  absl::StatusOr<NodeLease> PickNode(v1::InstanceRole role,
                                     const absl::flat_hash_set<std::string>& excluded,
                                     PromptPrefixHashes* prompt = nullptr);
  // Sleeps the backoff after the `failures`-th retryable failure; false when the client
  // cancelled meanwhile.
  bool Backoff(int failures);
  // `logprobs`: the token's, when the request asked for them (else nullptr).
  void SendToken(int32_t id, int32_t index, const v1::TokenLogprobs* logprobs = nullptr);
  // Status of a failed node call as the request sees it: a retryable failure names the node,
  // anything else reaches the client exactly as the node sent it.
  absl::Status NodeError(v1::InstanceRole role, const std::string& node, const absl::Status& s,
                         bool retryable);
  std::string NodeRequestId() const;
  // The fields of a Decode call every path sets alike: the request id, the KV handle, the
  // request's sampling and stop ids, and `plan`'s first token, budget and draw number.
  v1::DecodeRequest DecodeRequestFor(const DecodePlan& plan) const;
  // A retryable-or-not failure of a decode call on `decode_node`, attributed: the prefill node
  // holding the KV when the decode node reports it could not reach it (that prefill node is then
  // avoided, and reported when UNAVAILABLE), else the decode node (avoided when retryable).
  struct DecodeBlame {
    absl::Status error;  // names the node, as NodeError does
    v1::InstanceRole role = v1::INSTANCE_ROLE_DECODE;
    std::string node;
  };
  DecodeBlame BlameDecodeFailure(const std::string& decode_node, const absl::Status& failure,
                                 bool retryable);
  // Provenance (provenance.h). A decode node's DecodeServed (its call's first event).
  void NoteServed(const std::string& node, const v1::DecodeServed& served);
  // Strict mode, before a retryable failure (`error`, already naming the node) is handed to
  // `state`: when strict mode refuses `recovery` and the request still has tokens to produce,
  // fails the request with StrictRefusal and returns true.
  bool StrictStops(RequestState& state, Recovery recovery, const absl::Status& error);
  // After the state took a retryable failure: when it recovers (back to kPrefill), records it.
  void NoteRecovery(const RequestState& state, v1::InstanceRole role, const std::string& node,
                    const absl::Status& error, Recovery recovery);
  absl::Time UnaryDeadline() const {
    return std::min(clock_->Now() + deps_.options.rpc_timeout, client_deadline_);
  }
  // The request's log line and its end-of-request metrics.
  void LogEnd(const RequestState* state, const absl::Status& status);
  // Serves one sequence to its end with retries and resumes (Run's loop): the request, or one
  // choice of an n > 1 request (choice_ set, prepared_.sampling.seed its own).
  void Serve(RequestState& state);

  // ---- n > 1 from one prefill (generate_driver_choices.cc) ----
  struct Choice {
    int32_t index = 0;
    std::optional<RequestState> state;
    std::optional<StreamingDecoder> detokenizer;
    bool ended = false;  // its ChoiceEnd was sent
  };
  // Run for prepared_.n > 1 choices, once prepared: returns the client's status.
  grpc::Status RunChoices();
  // One prefill for every choice (first tokens sampled with seed + index), then one Decode call
  // with every choice that goes on; leaves each choice done, failed, or to resume on its own.
  void PrefillAndDecodeChoices();
  // The Decode call of `live` (choices in kDecode after the joint prefill).
  void DecodeChoices(const std::vector<Choice*>& live);
  // A ChoiceEnd for each choice done since the last call.
  void SendChoiceEnds();
  std::vector<Choice> choices_;
  // The choice whose tokens SendToken sends (its detokenizer, TokenChunk.choice); null with n = 1.
  Choice* choice_ = nullptr;
  // The next Prefill asks for every choice's first token (PrefillRequest.n) and leaves them here.
  bool prefill_choices_ = false;
  std::vector<int32_t> choice_first_tokens_;
  std::vector<v1::TokenLogprobs> choice_first_logprobs_;

  const RouterDeps& deps_;
  const absl::Time client_deadline_;
  const CancellationToken& cancel_;
  GenerateSink* const sink_;
  NodeClient* const nodes_;
  Clock* const clock_;
  const absl::Time start_;

  std::string request_id_;
  PreparedRequest prepared_;
  // The prompt's prefix-cache hash chains, for kv_aware prefill picks (over prepared_.prompt).
  std::optional<PromptPrefixHashes> prompt_hashes_;
  // Prompt tokens the last prefill node picked was expected to hold (its digest), for the log.
  int64_t cached_prefix_tokens_ = 0;
  // Prompt tokens the prefix cache served in the first successful prefill of the prompt (the
  // node's PrefillResponse.cached_tokens), for Usage.cached_tokens; unset until then.
  std::optional<int32_t> prompt_cached_tokens_;
  std::optional<StreamingDecoder> detokenizer_;
  std::optional<HeldKv> kv_;
  absl::flat_hash_set<std::string> failed_prefill_;
  absl::flat_hash_set<std::string> failed_decode_;
  int node_calls_ = 0;
  // The id nodes see (NodeRequestId): unique within this router even when clients reuse a
  // request id, so a release by request id never frees another request's lease.
  std::string node_request_id_;
  absl::Time first_token_at_ = absl::InfinitePast();
  absl::Time last_token_at_ = absl::InfinitePast();
  // Time spent in node calls, for the log line.
  absl::Duration prefill_time_;
  absl::Duration decode_time_;
  absl::Duration transfer_time_;  // as the decode nodes report it (DecodeFinish.transfer_us)
  int resumes_ = 0;
  int pipelined_ = 0;  // pipelined Decode calls made
  Provenance provenance_;
};

}  // namespace tandem::generate_internal
