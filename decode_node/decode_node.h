// A decode instance (docs/design.md#request-lifecycle, #kv-transfer): a TP×DCP instance whose KV
// pools a transport allocates (one KvPuller per rank, made by the injected KvPullerFactory), a
// DecodeEngine, and the handshake/transfer path that turns a prefill instance's KvHandle into local
// KV, talking to the prefill through the injected PrefillClient (gRPC in tandem-decode, fakes in
// tests):
//
//   transfer metadata (cached per prefill engine id + epoch; compatibility hash checked once) →
//   lease kept alive from here until the pull ends (LeaseKeeper) → blocks for prompt +
//   max_new_tokens (waiting for capacity up to queue_timeout) → plan (kv_transfer/planner.h) →
//   one pull per rank, all ranks concurrently, each on its rank's persistent lane (rank_pulls.h)
//   → KV digests checked (kv_transfer/kv_digest.h), block ranges as they land while later ones
//   are in flight (overlapped_kv_check.h; a mismatch discards the KV and fails with ABORTED
//   naming the prefill, so the router prefills again elsewhere) → ReleaseKv, quoting the handle's
//   block generations → if the lease did not hold, discard and fail with ABORTED (the router
//   prefills again) → continuous-batched decode, tokens streamed through DecodeSink.
//
// With `colocated_prefill` the node also serves StartColocated: it prefills a prompt itself on
// the same instance and pools and decodes it, no prefill node and no transfer
// (decode_node/colocated_prefill.h).
//
// Start's errors: INVALID_ARGUMENT (bad call, malformed metadata), FAILED_PRECONDITION
// (incompatible prefill), RESOURCE_EXHAUSTED (capacity: never enough, or not within
// queue_timeout), ABORTED (the lease was lost; the prefill restarted), CANCELLED (the caller),
// DEADLINE_EXCEEDED (a pull stalled for stall_timeout), UNAVAILABLE (prefill or transfer peer
// unreachable, release unconfirmed), DATA_LOSS (a short transfer). Every failure frees the
// local blocks and, when this node still holds the prefill's KV lease, releases it.
// Thread-safety: all public methods are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "decode_node/colocated_prefill.h"
#include "decode_node/decode_sink.h"
#include "decode_node/lease_keeper.h"
#include "decode_node/prefill_client.h"
#include "decode_node/rank_pulls.h"
#include "engine/block_manager.h"
#include "engine/decode_engine.h"
#include "engine/instance.h"
#include "kv_transfer/kv_puller.h"
#include "kv_transfer/overlapped_kv_check.h"
#include "kv_transfer/transfer_types.h"

namespace tandem {

struct DecodeNodeOptions {
  std::string model_path;
  std::string model_name;
  std::string advertised_address;
  InstanceOptions instance;  // role forced to kDecode
  DecodeOptions decode;
  absl::Duration queue_timeout = absl::Seconds(30);  // waiting for KV capacity
  absl::Duration rpc_timeout = absl::Seconds(10);    // calls to prefill instances
  absl::Duration stall_timeout = absl::Seconds(10);  // KV pull without progress
  int32_t max_in_flight = 1024;  // gets outstanding per rank (64 starves small-row TCP pulls)
  // With KV digests, an unpipelined pull goes in ranges of about this many bytes, each range's
  // blocks checked while the next is in flight (issue 28 item 4); 0: one pull, checked after.
  int64_t pull_chunk_bytes = int64_t{16} << 20;
  KvPullerFactory pullers;                 // required: the transport
  std::shared_ptr<PrefillClient> prefill;  // required: how prefill instances are reached
  bool colocated_prefill = false;          // also prefill prompts here (StartColocated)
  PrefillOptions colocated;                // the colocated prefill engine's options
};

// One sequence of an n > 1 call (DecodeCall::choices).
struct DecodeChoice {
  int32_t index = 0;        // the choice's number: it samples with sampling.seed + index
  int32_t first_token = 0;  // its token at position kv.num_tokens (already streamed)
};

struct DecodeCall {
  std::string request_id;
  int32_t first_token = 0;
  KvHandle kv;
  SamplingParams sampling;
  int32_t max_new_tokens = 1;
  std::vector<int32_t> stop_ids;
  uint64_t next_step = 1;
  // The ids at the KV's positions [0, kv.num_tokens): required, that many, when
  // NeedsContext(sampling) (the penalties read them; a grammar replays the generated ones);
  // ignored otherwise.
  std::vector<int32_t> context_ids;
  // Pipelined transfer: kv is an early handle of a prefill still running; first_token is
  // ignored (the prefill's, learnt from its progress stream, goes to sink.on_token first).
  bool pipelined = false;
  // n > 1 from one prefill (engine/choice_blocks.h): the sequences to decode from this one KV
  // (first_token is then ignored). The KV is pulled once; the choices share its full blocks and
  // each further choice gets a copy of the partial last one. Empty: one sequence. Not with
  // pipelined.
  std::vector<DecodeChoice> choices;
};

// call.choices: none pipelined, indexes distinct and in [0, kMaxChoices), first tokens in
// [0, vocab_size), at most kMaxChoices of them. INVALID_ARGUMENT naming what is wrong.
absl::Status CheckDecodeChoices(const DecodeCall& call, int32_t vocab_size);

struct TransferStats {
  int64_t micros = 0;  // time spent pulling (pipelined: the pulls' sum, not the prefill's wait)
  int64_t bytes = 0;
  int64_t copies = 0;
  // Pipelined: pulls (one per progress step), and those done while the prefill still ran.
  int32_t chunks = 0;
  int32_t chunks_before_prefill_done = 0;
  // KV digests: whether the handle had them and every pulled byte matched, and the check's time.
  bool digests_verified = false;
  int64_t digest_micros = 0;
  // Of that check: the time it still took after the last pull (what the request waited for; the
  // rest overlapped the pull), and the block ranges checked while later ones were in flight.
  int64_t digest_wait_micros = 0;
  int32_t digest_ranges_overlapped = 0;
  // Prompt bytes checked from CRCs the pull computed while copying them (copy_crcs.h), not
  // read again.
  int64_t digest_fused_bytes = 0;
};

class DecodeNode {
 public:
  static absl::StatusOr<std::unique_ptr<DecodeNode>> Create(DecodeNodeOptions options);
  ~DecodeNode();
  DecodeNode(const DecodeNode&) = delete;
  DecodeNode& operator=(const DecodeNode&) = delete;

  // Pulls the KV and starts decoding. On OK the request is running and `sink.on_done` will be
  // called exactly once; on error nothing will be called. `cancel` ends the wait for capacity
  // and the pull at once (CANCELLED). With call.pipelined the KV is pulled as the prefill computes
  // it (PullPipelined) and, on OK, the prefill's first token has gone to sink.on_token before Start
  // returns; errors of the progress stream name the prefill ("prefill <address>").
  absl::StatusOr<TransferStats> Start(const DecodeCall& call, DecodeSink sink,
                                      const CancellationToken& cancel);
  // Start for call.choices: sinks[i] gets choice call.choices[i]'s events, each sink's on_done
  // exactly once on OK (nothing on error; a choice the engine had already started when a later
  // one was refused ends CANCELLED). Cancel(request_id) cancels every choice. REQUIRES:
  // sinks.size() == call.choices.size() (INVALID_ARGUMENT otherwise).
  absl::StatusOr<TransferStats> StartChoices(const DecodeCall& call, std::vector<DecodeSink> sinks,
                                             const CancellationToken& cancel);
  // Colocated prefill: prefills call.prompt here, then decodes; the first token goes through
  // sink.on_token too. On OK `sink.on_done` will be called exactly once; on error nothing will
  // be called. FAILED_PRECONDITION when the node was built without colocated_prefill;
  // INVALID_ARGUMENT / RESOURCE_EXHAUSTED for a request that can never run (ColocatedPrefill).
  absl::Status StartColocated(ColocatedCall call, DecodeSink sink);
  bool colocated_prefill() const { return colocated_ != nullptr; }
  bool Cancel(const std::string& request_id);

  const std::string& model_name() const { return model_name_; }
  const std::string& engine_id() const { return engine_id_; }
  const std::string& advertised_address() const { return options_.advertised_address; }
  KvLayout layout() const;
  int32_t free_blocks() const { return blocks_->free_blocks(); }
  int32_t total_blocks() const { return blocks_->total_blocks(); }
  int64_t block_free_errors() const { return blocks_->free_errors(); }
  // Bytes of model weights each rank holds (Instance::weight_bytes), in rank order.
  std::vector<int64_t> weight_bytes_per_rank() const {
    std::vector<int64_t> out;
    for (int32_t r = 0; r < instance_->world(); ++r) out.push_back(instance_->weight_bytes(r));
    return out;
  }
  int32_t running() const { return engine_->running(); }
  int32_t queued() const;
  absl::Time started() const { return started_; }
  // Since start: transfers whose KV failed its digests (discarded), and transfers verified.
  int64_t kv_digest_mismatches() const { return kv_digest_mismatches_.load(); }
  int64_t kv_digests_verified() const { return kv_digests_verified_.load(); }
  // Since start: wall time spent checking the digests of transfers that had them (verified or
  // not): OverlappedKvCheck's check_time (on the lane or not) and its CRC bookkeeping.
  absl::Duration kv_digest_check_time() const {
    return absl::Nanoseconds(kv_digest_check_nanos_.load());
  }
  // Since start: KV blocks taken for Decode calls with a KV handle (n choices of one prompt share
  // its full blocks, so they take far fewer than n times one's).
  int64_t blocks_allocated() const { return blocks_allocated_.load(); }

 private:
  explicit DecodeNode(DecodeNodeOptions options);
  absl::StatusOr<std::shared_ptr<const TransferMetadata>> Metadata(const KvHandle& kv);
  // `pull`: the call's pull token (a child of the request's `cancel`, cancelled too when the
  // lease is lost); either ends the wait at once.
  absl::StatusOr<std::vector<int32_t>> WaitForBlocks(int32_t count, const CancellationToken& cancel,
                                                     const CancellationToken& pull,
                                                     const LeaseKeeper& lease);
  // All ranks' pulls at once, on the per-rank lanes (RankPulls); the first failure cancels
  // `pull`, and so the others. The request's cancel and a lost lease cancel it too. With `check`,
  // the pullers CRC what they copy (check->CrcRequests) and, once `plan` landed, the check is told
  // that prompt tokens [0, landed_tokens) are in (OverlappedKvCheck::Landed).
  absl::Status Pull(const TransferMetadata& source, const TransferPlan& plan,
                    CancellationToken* pull, OverlappedKvCheck* check = nullptr,
                    int64_t landed_tokens = 0);
  // The unpipelined pull of kv's whole prompt into `blocks`: with digests and more than
  // pull_chunk_bytes, in block-aligned ranges, telling `check` as each lands; else one Pull.
  absl::Status PullAll(const TransferMetadata& source, const KvHandle& kv,
                       const std::vector<int32_t>& blocks, CancellationToken* pull,
                       OverlappedKvCheck* check, TransferStats* stats);
  // Pipelined transfer: pulls kv's prompt part by part as its prefill reports progress (each
  // range planned with PlanKvTransferRange), until the prefill is done; its first token in
  // *first_token (its log-probabilities, when sent, in *first_logprobs). Each wait for progress is
  // bounded by stall_timeout (the prefill node repeats its progress every kWatchHeartbeat) and
  // ends at once when `pull` is cancelled (the request's `cancel`: CANCELLED; else the lease was
  // lost: ABORTED).
  absl::Status PullPipelined(const TransferMetadata& source, const KvHandle& kv,
                             const std::vector<int32_t>& blocks, const CancellationToken& cancel,
                             CancellationToken* pull, int32_t* first_token,
                             std::optional<TokenLogprobs>* first_logprobs,
                             std::vector<uint32_t>* digests, OverlappedKvCheck* check,
                             TransferStats* stats);
  // What `check` needs to check kv's prompt landing in `blocks` (the local pools).
  OverlappedKvCheckInput CheckInput(const TransferMetadata& source, const KvHandle& kv,
                                    const std::vector<int32_t>& blocks) const;
  // Finishes `check` (the ranges not checked while the pull was in flight) once the whole prompt
  // landed; counts and logs a mismatch. ABORTED naming the prefill on a mismatch or a malformed
  // digest list.
  absl::Status VerifyDigests(const KvHandle& kv, OverlappedKvCheck* check, TransferStats* stats);
  // OK unless digests came for device pools (GPU-direct KV, --kv_gpu_direct): those cannot be
  // read on the host, so the KV could not be proven — FAILED_PRECONDITION, nothing is read.
  absl::Status DigestsCheckable(const std::vector<uint32_t>& digests) const;
  // Best effort: the prefill frees the KV; returns whether its lease held.
  absl::StatusOr<bool> ReleaseKv(const KvHandle& kv);
  // Start and StartChoices: sinks has one entry per sequence (max(1, call.choices.size())).
  absl::StatusOr<TransferStats> StartCall(const DecodeCall& call, std::vector<DecodeSink> sinks,
                                          const CancellationToken& cancel);
  // After the pull: the call's sequences join the engine (decode_choices.cc). `allocated` holds
  // choice 0's table (its first per_choice blocks, with the pulled KV) and the other choices' own
  // blocks (ChoiceBlocksNeeded in all); it is consumed either way — on an error every block not
  // handed to the engine is freed.
  absl::Status Admit(const DecodeCall& call, std::vector<int32_t> allocated, int64_t per_choice,
                     int32_t first_token, const std::optional<TokenLogprobs>& first_logprobs,
                     std::vector<DecodeSink> sinks);

  DecodeNodeOptions options_;
  std::string model_name_;
  std::string engine_id_;
  std::string identity_;
  LlamaConfig config_;
  absl::Time started_;

  std::vector<std::unique_ptr<KvPuller>> pullers_;  // [world]; own the pools
  std::unique_ptr<Instance> instance_;
  std::unique_ptr<BlockManager> blocks_;
  std::unique_ptr<DecodeEngine> engine_;
  // The pullers' lanes (and the digest check's); declared after what their jobs touch.
  std::unique_ptr<RankPulls> pulls_;

  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, uint64_t>, std::shared_ptr<const TransferMetadata>> metadata_
      ABSL_GUARDED_BY(mu_);
  int32_t waiting_ ABSL_GUARDED_BY(mu_) = 0;  // calls waiting for capacity or pulling
  std::atomic<int64_t> kv_digest_mismatches_{0};
  std::atomic<int64_t> kv_digests_verified_{0};
  std::atomic<int64_t> kv_digest_check_nanos_{0};
  std::atomic<int64_t> blocks_allocated_{0};
  std::unique_ptr<ColocatedPrefill> colocated_;  // with colocated_prefill; destroyed first
};

}  // namespace tandem
