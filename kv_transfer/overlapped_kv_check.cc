#include "kv_transfer/overlapped_kv_check.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
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
  IndexCopies();
  digests_ = std::move(digests);
  Landed(landed_);
  return absl::OkStatus();
}

// copies_of_block_[i][d]: the copies of plan_.copies[d] that read table index i's blocks, so a
// range's check walks its own copies, not the whole prompt's (a 1 GiB pull in 64 ranges would
// otherwise split every copy 64 times).
void OverlappedKvCheck::IndexCopies() {
  const int32_t world = static_cast<int32_t>(plan_.copies.size());
  copies_of_block_.assign(static_cast<size_t>(blocks_),
                          std::vector<std::vector<int32_t>>(static_cast<size_t>(world)));
  absl::flat_hash_map<int32_t, int64_t> index_of_block;
  for (int64_t i = 0; i < blocks_; ++i) index_of_block[in_.src_blocks[i]] = i;
  const int64_t block_bytes = RankPoolGeometry(in_.src, 0).block_bytes();
  for (int32_t d = 0; d < world; ++d) {
    const std::vector<TransferCopy>& copies = plan_.copies[d];
    for (int32_t k = 0; k < static_cast<int32_t>(copies.size()); ++k) {
      const int64_t first = copies[k].src_offset / block_bytes;
      const int64_t last = (copies[k].src_offset + copies[k].length - 1) / block_bytes;
      for (int64_t b = first; b <= last; ++b) {
        const auto it = index_of_block.find(static_cast<int32_t>(b));
        // A copy outside the table stays in block 0's list: the check reports it.
        const int64_t i = it == index_of_block.end() ? 0 : it->second;
        std::vector<int32_t>& list = copies_of_block_[static_cast<size_t>(i)][d];
        if (list.empty() || list.back() != k) list.push_back(k);
      }
    }
  }
}

TransferPlan OverlappedKvCheck::RangePlan(int64_t begin, int64_t end) const {
  TransferPlan part;
  part.copies.resize(plan_.copies.size());
  for (size_t d = 0; d < plan_.copies.size(); ++d) {
    std::vector<int32_t> ks;
    for (int64_t i = begin; i < end; ++i) {
      const std::vector<int32_t>& list = copies_of_block_[static_cast<size_t>(i)][d];
      ks.insert(ks.end(), list.begin(), list.end());
    }
    std::sort(ks.begin(), ks.end());
    ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
    for (int32_t k : ks) part.copies[d].push_back(plan_.copies[d][k]);
  }
  return part;
}

absl::StatusOr<std::vector<CopyCrcs>> OverlappedKvCheck::CrcRequests(
    const TransferPlan& part) const {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<CopyCrcs>> requests =
      KvDigestCrcRequests(in_.src, part, in_.num_tokens, in_.src_blocks);
  crc_bookkeeping_time_ += absl::Now() - start;
  return requests;
}

void OverlappedKvCheck::Landed(int64_t tokens, const TransferPlan* part,
                               const std::vector<CopyCrcs>* crcs) {
  last_pull_fused_ = false;
  if (part != nullptr && crcs != nullptr && crcs->size() == part->copies.size()) {
    const absl::Time start = absl::Now();
    last_pull_fused_ = true;
    for (const CopyCrcs& c : *crcs) {
      last_pull_fused_ = last_pull_fused_ && std::all_of(c.computed.begin(), c.computed.end(),
                                                         [](uint8_t x) { return x != 0; });
    }
    auto landed = std::make_shared<LandedCrcs>();
    for (size_t d = 0; d < crcs->size(); ++d) {
      landed->Add(static_cast<int32_t>(d), part->copies[d], (*crcs)[d]);
    }
    if (landed->bytes() > 0) {
      fused_bytes_ += landed->bytes();
      landed_crcs_.push_back(std::move(landed));
    }
    crc_bookkeeping_time_ += absl::Now() - start;
  }
  landed_ = std::max(landed_, std::min(tokens, in_.num_tokens));
  // Once everything landed the pull is over: Finish checks the rest on the waiting thread.
  if (digests_.empty() || landed_ == in_.num_tokens) return;
  const int64_t whole = landed_ / block_tokens_;
  if (whole <= queued_) return;
  const int64_t begin = queued_, end = whole;
  // With CRCs from the copy the check only combines them (and reads what was not CRCed while
  // it is still cached): no reason to hand it to another thread.
  if (lanes_ == nullptr || !landed_crcs_.empty()) {
    Check(begin, end, 1, landed_crcs_);
    queued_ = end;
    if (!landed_crcs_.empty()) {
      absl::MutexLock lock(&mu_);
      ++early_checks_;
    }
    return;
  }
  jobs_->Add();
  const absl::Status queued = lanes_->Submit(
      lane_,
      [this, jobs = jobs_, begin, end] {
        Check(begin, end, 1, LandedCrcList());
        {
          absl::MutexLock lock(&mu_);
          ++early_checks_;
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

void OverlappedKvCheck::Check(int64_t begin, int64_t end, int32_t threads,
                              const LandedCrcList& landed) {
  const absl::Time start = absl::Now();
  std::vector<KvDigestMismatch> bad;
  const absl::Status s =
      VerifyKvDigestRange(in_.src, in_.dst, RangePlan(begin, end), in_.num_tokens,
                          KvDigestBinding{in_.request_id, in_.lease_generation, in_.src_blocks,
                                          in_.src_block_generations},
                          digests_, in_.dst_pools, begin, end, &bad, threads, &landed);
  const absl::Duration took = absl::Now() - start;
  absl::MutexLock lock(&mu_);
  check_time_ += took;
  bad_.insert(bad_.end(), bad.begin(), bad.end());
  if (status_.ok()) status_ = s;
}

absl::Status OverlappedKvCheck::Finish(std::vector<KvDigestMismatch>* mismatches, int32_t threads) {
  if (queued_ < blocks_) Check(queued_, blocks_, threads, landed_crcs_);
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

int32_t OverlappedKvCheck::early_checks() const {
  absl::MutexLock lock(&mu_);
  return early_checks_;
}

}  // namespace tandem
