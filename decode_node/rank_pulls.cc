#include "decode_node/rank_pulls.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/kv_source_failure.h"

namespace tandem {
namespace {

// One Pull's state, shared with its jobs (which outlive their last touch of the caller's stack).
struct PullBatch {
  explicit PullBatch(size_t world) : results(world) {}
  std::vector<absl::Status> results;  // [rank]; written by that rank's job before Done
  JobGroup jobs;
};

}  // namespace

RankPulls::RankPulls(std::vector<KvPuller*> pullers, std::vector<absl::Span<std::byte>> pools,
                     RankPullsOptions options)
    : pullers_(std::move(pullers)),
      pools_(std::move(pools)),
      options_(options),
      lanes_("KV pull lane", static_cast<int32_t>(pullers_.size()), options.queue_capacity),
      check_lanes_("KV digest check lane", 1, options.queue_capacity) {}

absl::Status RankPulls::Pull(const TransferMetadata& source, const TransferPlan& plan,
                             CancellationToken* cancel, std::vector<CopyCrcs>* crcs) {
  const int32_t world = static_cast<int32_t>(plan.copies.size());
  if (world != static_cast<int32_t>(pullers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transfer plan for ", world, " ranks on a decode instance of ", pullers_.size()));
  }
  if (crcs != nullptr && static_cast<int32_t>(crcs->size()) != world) {
    return absl::InvalidArgumentError(
        absl::StrCat("CRC requests for ", crcs->size(), " ranks, a plan of ", world));
  }
  auto batch = std::make_shared<PullBatch>(static_cast<size_t>(world));
  const absl::Time submit_deadline = absl::Now() + options_.stall_timeout;
  for (int32_t d = 0; d < world; ++d) {
    batch->jobs.Add();
    // The job references `source` and `plan`: this call waits for it below, whatever happens.
    const absl::Status queued = lanes_.Submit(
        d,
        [this, batch, d, &source, &plan, cancel, crcs] {
          absl::Status& result = batch->results[d];
          if (cancel->cancelled()) {
            result = absl::CancelledError(absl::StrCat(
                "KV transfer from engine '", source.engine_id, "' epoch ", source.epoch,
                " cancelled after 0 of ", plan.copies[d].size(), " copies"));
          } else {
            PullOptions po;
            po.max_in_flight = options_.max_in_flight;
            po.stall_timeout = options_.stall_timeout;
            po.cancel = cancel;
            std::vector<int32_t> blamed;
            po.failed_source_ranks = &blamed;
            po.copy_crcs = crcs != nullptr ? &(*crcs)[d] : nullptr;
            result = pullers_[d]->Execute(source, plan.copies[d], pools_[d], po);
            if (!blamed.empty()) {
              // The puller named the source ranks at fault: the failure is about the prefill.
              result = BlameKvSource(std::move(result), {"", source.engine_id, blamed});
            }
          }
          if (!result.ok()) cancel->Cancel();  // the others cannot make this request succeed
          batch->jobs.Done();
        },
        submit_deadline);
    if (!queued.ok()) {
      batch->results[d] = absl::ResourceExhaustedError(
          absl::StrCat("KV pull of decode rank ", d, " not started: ", queued.message()));
      cancel->Cancel();
      batch->jobs.Done();
    }
  }
  // The jobs reference `source`, `plan` and `crcs`: wait for every one. Each ends within its
  // stall_timeout, and at once on a cancel (the pullers wait on the token).
  while (!batch->jobs.WaitFor(options_.stall_timeout)) {
  }
  // Report the cause, not the cancellations it triggered in the other ranks.
  absl::Status first_cancel;
  for (const absl::Status& r : batch->results) {
    if (r.ok()) continue;
    if (!absl::IsCancelled(r)) return r;
    if (first_cancel.ok()) first_cancel = r;
  }
  return first_cancel;
}

}  // namespace tandem
