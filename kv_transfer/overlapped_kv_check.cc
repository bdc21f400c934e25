#include "kv_transfer/overlapped_kv_check.h"

#include <algorithm>
#include <utility>

#include "attention/dcp_layout.h"
#include "kv_transfer/planner.h"

namespace tandem {
namespace {

// Bound of one wait for the lane in the destructor and Finish; they loop until it is done
// (every check is CPU work of bounded length).
constexpr absl::Duration kLaneWaitSlice = absl::Seconds(1);

}  // namespace

OverlappedKvCheck::OverlappedKvCheck(OverlappedKvCheckInput input, SerialWorkers* lanes,
                                     int32_t lane)
    : in_(std::move(input)),
      lanes_(lanes),
      lane_(lane),
      blocks_(VirtualBlocksFor(in_.src.parallel.dcp_geometry(), in_.num_tokens)),
      block_tokens_(VirtualBlockTokens(in_.src.parallel.dcp_geometry())) {}

OverlappedKvCheck::~OverlappedKvCheck() { WaitForLane(); }

void OverlappedKvCheck::WaitForLane() {
  while (!jobs_->WaitFor(kLaneWaitSlice)) {
  }
}

absl::Status OverlappedKvCheck::SetDigests(std::vector<uint32_t> digests) {
  if (digests.empty()) return absl::OkStatus();
  absl::StatusOr<TransferPlan> plan =
      PlanKvTransfer(in_.src, in_.src_blocks, in_.dst, in_.dst_blocks, in_.num_tokens);
  if (!plan.ok()) return plan.status();
  plan_ = *std::move(plan);
  digests_ = std::move(digests);
  Landed(landed_);
  return absl::OkStatus();
}

void OverlappedKvCheck::Landed(int64_t tokens) {
  landed_ = std::max(landed_, std::min(tokens, in_.num_tokens));
  // Once everything landed the pull is over: Finish checks the rest on the waiting thread.
  if (digests_.empty() || landed_ == in_.num_tokens) return;
  const int64_t whole = landed_ / block_tokens_;
  if (whole <= queued_) return;
  const int64_t begin = queued_, end = whole;
  if (lanes_ == nullptr) {
    Check(begin, end, 1);
    queued_ = end;
    return;
  }
  jobs_->Add();
  const absl::Status queued = lanes_->Submit(
      lane_,
      [this, jobs = jobs_, begin, end] {
        Check(begin, end, 1);
        {
          absl::MutexLock lock(&mu_);
          ++lane_checks_;
        }
        jobs->Done();  // the last touch of this object: the destructor may run from here on
      },
      absl::Now());  // a full lane is not waited for: Finish checks these blocks
  if (!queued.ok()) {
    jobs_->Done();
    return;
  }
  queued_ = end;
}

void OverlappedKvCheck::Check(int64_t begin, int64_t end, int32_t threads) {
  const absl::Time start = absl::Now();
  std::vector<KvDigestMismatch> bad;
  const absl::Status s =
      VerifyKvDigestRange(in_.src, in_.dst, plan_, in_.num_tokens,
                          KvDigestBinding{in_.request_id, in_.lease_generation, in_.src_blocks,
                                          in_.src_block_generations},
                          digests_, in_.dst_pools, begin, end, &bad, threads);
  const absl::Duration took = absl::Now() - start;
  absl::MutexLock lock(&mu_);
  check_time_ += took;
  bad_.insert(bad_.end(), bad.begin(), bad.end());
  if (status_.ok()) status_ = s;
}

absl::Status OverlappedKvCheck::Finish(std::vector<KvDigestMismatch>* mismatches, int32_t threads) {
  if (queued_ < blocks_) Check(queued_, blocks_, threads);
  queued_ = blocks_;
  WaitForLane();
  absl::MutexLock lock(&mu_);
  if (mismatches != nullptr) mismatches->insert(mismatches->end(), bad_.begin(), bad_.end());
  return status_;
}

absl::Duration OverlappedKvCheck::check_time() const {
  absl::MutexLock lock(&mu_);
  return check_time_;
}

int64_t BlocksPerPullRange(int64_t total_bytes, int64_t num_blocks, int64_t range_bytes) {
  if (range_bytes <= 0 || total_bytes <= range_bytes || num_blocks < 2) {
    return std::max<int64_t>(1, num_blocks);
  }
  return std::max<int64_t>(1, range_bytes * num_blocks / total_bytes);
}

int32_t OverlappedKvCheck::lane_checks() const {
  absl::MutexLock lock(&mu_);
  return lane_checks_;
}

}  // namespace tandem
