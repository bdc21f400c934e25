// In-process Communicator for the rank threads of one CPU instance.
//
// Ranks exchange pointers to their buffers through a shared CpuCommGroup and copy directly from
// each other's memory; no data is staged. Sums take f32, bf16 and f16 (bf16/f16 widened to f32,
// added in rank order and rounded after every addition). Waiting blocks on a condition variable
// (rank threads may outnumber cores — tp=9 on 2 cores — so nobody spins), and every wait is bounded
// by the group's timeout.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/communicator.h"

namespace tandem {

// Shared state of one group of `size` ranks. Create once, then one communicator per member.
class CpuCommGroup {
 public:
  CpuCommGroup(int32_t size, absl::Duration timeout);
  CpuCommGroup(const CpuCommGroup&) = delete;
  CpuCommGroup& operator=(const CpuCommGroup&) = delete;

  int32_t size() const { return size_; }

  // Publishes this rank's pointers, then waits until all ranks have published (phase 1), runs
  // `body` (which may read every rank's published pointers), then waits until every rank has
  // finished its body (phase 2) so no buffer is reused while a peer still reads it.
  absl::Status Exchange(int32_t rank, const void* send, void* recv,
                        const std::function<void()>& body);
  const void* send_ptr(int32_t rank) const { return send_[rank]; }
  void* recv_ptr(int32_t rank) const { return recv_[rank]; }

  void Abort(const absl::Status& reason);

 private:
  absl::Status Arrive();  // a reusable barrier; bounded by timeout_

  const int32_t size_;
  const absl::Duration timeout_;
  // Written by rank r between barriers only; read by others after the barrier.
  std::vector<const void*> send_;
  std::vector<void*> recv_;

  absl::Mutex mu_;
  int32_t arrived_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
};

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<CpuCommGroup> group, int32_t rank);

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return group_->size(); }

  absl::Status AllGather(const void* send, void* recv, int64_t count, CommDType dtype) override;
  absl::Status ReduceScatter(const void* send, void* recv, int64_t count, CommDType dtype) override;
  absl::Status AllReduce(void* data, int64_t count, CommDType dtype) override;
  absl::Status Broadcast(void* data, int64_t bytes, int32_t root) override;
  absl::Status Barrier() override;
  void Abort(const absl::Status& reason) override { group_->Abort(reason); }

 private:
  std::shared_ptr<CpuCommGroup> group_;
  const int32_t rank_;
  std::vector<float> scratch_;  // AllReduce result of this rank's slice (in its dtype)
};

// Creates `size` communicators sharing one new group (index = rank).
std::vector<std::unique_ptr<Communicator>> CreateCpuCommunicators(int32_t size,
                                                                  absl::Duration timeout);

}  // namespace tandem
