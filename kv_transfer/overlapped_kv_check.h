// OverlappedKvCheck: the decode side of KV digests (kv_digest.h, docs/kv_transfer.md "Provable
// KV") moved off the critical path (issue 28 item 4). A pull lands a prompt's KV range by range
// (chunks of one pull, or a pipelined prefill's progress steps); as soon as every prompt byte of
// a block has landed, that block's units are checked on a SerialWorkers lane while later ranges
// are still in flight. Finish checks what is left on the calling thread and waits for the lane,
// so what the caller sees after the last pull is the check of the last range only.
//
// Fused with the copy (copy_crcs.h): a pull given CrcRequests(range plan) as
// PullOptions::copy_crcs CRCs the bytes it moves itself in the same pass; Landed(t, &plan, &crcs)
// records them and the blocks now landed are checked at once on the calling thread by combining
// those CRCs (kv_digest.h LandedCrcs) — nothing is read again except parts no CRC covers (a
// transport that landed them itself), read right after landing, while cached.
//
// Usage: construct once the destination blocks are known; SetDigests when the digests are known
// (from the handle, or a pipelined prefill's last progress message) — blocks landed before are
// queued then; Landed(t) after each range [.., t) is in the pools (t non-decreasing); Finish once
// after the last pull succeeded. The destructor waits for queued checks (they read the pools and
// this object), so on every exit path nothing runs after it; checks are CPU-bound and bounded in
// length, so that wait is too. A lane whose queue is full is not waited for: those blocks are
// checked by Finish instead. Without lanes, ranges are checked inline as they land (the same
// bytes read while still cached, on one core).
//
// Thread-safety: the methods are for one thread (the pulling one); the lane's jobs share only
// state guarded by an internal mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kv_transfer/kv_digest.h"
#include "kv_transfer/serial_workers.h"
#include "kv_transfer/transfer_types.h"

namespace tandem {

struct OverlappedKvCheckInput {
  KvLayout src;
  KvLayout dst;
  int64_t num_tokens = 0;
  std::string request_id;
  uint64_t lease_generation = 0;
  std::vector<int32_t> src_blocks;  // the prefill's block table
  std::vector<uint32_t> src_block_generations;
  std::vector<int32_t> dst_blocks;                     // where the prompt lands
  std::vector<absl::Span<const std::byte>> dst_pools;  // [dst world], from each pool's base
};

class OverlappedKvCheck {
 public:
  // lanes: where checks run (lane `lane`). Null: each landed range is checked inline, on the
  // thread calling Landed, right after it landed (while its bytes are still in cache).
  OverlappedKvCheck(OverlappedKvCheckInput input, SerialWorkers* lanes, int32_t lane);
  ~OverlappedKvCheck();
  OverlappedKvCheck(const OverlappedKvCheck&) = delete;
  OverlappedKvCheck& operator=(const OverlappedKvCheck&) = delete;

  // Plans the whole prompt (PlanKvTransfer: the bytes every range plan lands) and queues the
  // blocks landed so far. Errors: the planner's. Empty digests: nothing is ever checked.
  [[nodiscard]] absl::Status SetDigests(std::vector<uint32_t> digests);
  bool has_digests() const { return !digests_.empty(); }

  // The CRC requests for pulling `part` (a range plan of this prompt): KvDigestCrcRequests.
  [[nodiscard]] absl::StatusOr<std::vector<CopyCrcs>> CrcRequests(const TransferPlan& part) const;

  // Prompt tokens [0, tokens) have landed: checks (or queues a check of) every block now wholly
  // landed (unless that is the whole prompt: then the pull is over and Finish checks the rest).
  // part and crcs, when given: the range plan just pulled and its CopyCrcs (one per rank) as
  // the pullers filled them; checks then run on this thread from the CRCs.
  void Landed(int64_t tokens, const TransferPlan* part = nullptr,
              const std::vector<CopyCrcs>* crcs = nullptr);

  // After the whole prompt landed: checks the blocks not yet checked here (with `threads`),
  // waits for the lane's checks, and returns VerifyKvDigestRange's first error (DATA_LOSS on a
  // mismatch). Every bad unit goes to *mismatches when given. REQUIRES: has_digests().
  [[nodiscard]] absl::Status Finish(std::vector<KvDigestMismatch>* mismatches, int32_t threads);

  // Checking time summed over every range (the lane's included): the check's whole cost.
  absl::Duration check_time() const;
  // Time this thread spent on the copy's CRCs apart from checking: planning them (CrcRequests)
  // and recording what came back (Landed). Not measurable apart: the CRC folded into the copy.
  absl::Duration crc_bookkeeping_time() const { return crc_bookkeeping_time_; }
  // Ranges checked before Finish while later ranges were still to land: on the lane, or here
  // from the copy's CRCs (not counted: plain inline checks without a lane).
  int32_t early_checks() const;
  // Bytes whose check came from CRCs computed in the copy (not read again).
  int64_t fused_bytes() const { return fused_bytes_; }
  // Whether the last Landed brought a CRC for every span it asked for: the transport moves the
  // bytes through this process, so pulling in ranges buys nothing (the check needs no overlap).
  bool last_pull_fused() const { return last_pull_fused_; }

 private:
  void Check(int64_t begin, int64_t end, int32_t threads, const LandedCrcList& landed);
  void WaitForLane();
  void IndexCopies();
  TransferPlan RangePlan(int64_t begin, int64_t end) const;

  const OverlappedKvCheckInput in_;
  SerialWorkers* const lanes_;
  const int32_t lane_;
  const int64_t blocks_;        // virtual blocks of the prompt (source layout)
  const int64_t block_tokens_;  // tokens per source virtual block
  std::vector<uint32_t> digests_;
  TransferPlan plan_;
  int64_t landed_ = 0;  // tokens landed
  int64_t queued_ = 0;  // blocks [0, queued_) are queued or checked
  // [table index][dst rank] → indices into plan_.copies[rank] reading that block.
  std::vector<std::vector<std::vector<int32_t>>> copies_of_block_;
  LandedCrcList landed_crcs_;  // one per pull that brought CRCs; read by this thread only
  int64_t fused_bytes_ = 0;
  bool last_pull_fused_ = false;
  mutable absl::Duration crc_bookkeeping_time_;  // CrcRequests is const; this thread's only
  // Shared with the queued jobs, which still touch it after their last use of this object.
  const std::shared_ptr<JobGroup> jobs_ = std::make_shared<JobGroup>();

  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::vector<KvDigestMismatch> bad_ ABSL_GUARDED_BY(mu_);
  absl::Duration check_time_ ABSL_GUARDED_BY(mu_);
  int32_t early_checks_ ABSL_GUARDED_BY(mu_) = 0;
};

// Blocks per pull range when `total_bytes` over `num_blocks` blocks are pulled in ranges of about
// `range_bytes` (what DecodeNode's unpipelined pull and bench/transfer both use): >= 1;
// num_blocks (one range) when range_bytes <= 0 or the whole fits in one range.
int64_t BlocksPerPullRange(int64_t total_bytes, int64_t num_blocks, int64_t range_bytes);

}  // namespace tandem
