#include "engine/cpu_communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tandem {

CpuCommGroup::CpuCommGroup(int32_t size, absl::Duration timeout)
    : size_(size), timeout_(timeout), send_(size, nullptr), recv_(size, nullptr) {}

absl::Status CpuCommGroup::Arrive() {
  absl::MutexLock lock(&mu_);
  if (!aborted_.ok()) return aborted_;
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    return absl::OkStatus();
  }
  auto released = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return generation_ != gen || !aborted_.ok();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&released), timeout_)) {
    aborted_ = absl::DeadlineExceededError(
        absl::StrCat("communicator: peers did not arrive within ", absl::FormatDuration(timeout_),
                     " (", arrived_, " of ", size_, " ranks waiting)"));
  }
  if (generation_ != gen) return absl::OkStatus();
  return aborted_;
}

void CpuCommGroup::Abort(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) {
    aborted_ = reason.ok() ? absl::AbortedError("communicator aborted") : reason;
  }
}

absl::Status CpuCommGroup::Exchange(int32_t rank, const void* send, void* recv,
                                    const std::function<void()>& body) {
  send_[rank] = send;
  recv_[rank] = recv;
  if (absl::Status s = Arrive(); !s.ok()) return s;
  body();
  return Arrive();
}

CpuCommunicator::CpuCommunicator(std::shared_ptr<CpuCommGroup> group, int32_t rank)
    : group_(std::move(group)), rank_(rank) {}

absl::Status CpuCommunicator::AllGather(const void* send, void* recv, int64_t count,
                                        CommDType dtype) {
  const int64_t bytes = count * CommDTypeBytes(dtype);
  return group_->Exchange(rank_, send, recv, [&] {
    for (int32_t r = 0; r < group_->size(); ++r) {
      if (bytes > 0) {
        std::memcpy(static_cast<char*>(recv) + r * bytes, group_->send_ptr(r), bytes);
      }
    }
  });
}

absl::Status CpuCommunicator::ReduceScatter(const void* send, void* recv, int64_t count,
                                            CommDType dtype) {
  if (dtype != CommDType::kF32) {
    return absl::InvalidArgumentError("cpu communicator: ReduceScatter supports f32 only");
  }
  return group_->Exchange(rank_, send, recv, [&] {
    float* out = static_cast<float*>(recv);
    const int64_t begin = rank_ * count;
    const float* first = static_cast<const float*>(group_->send_ptr(0)) + begin;
    for (int64_t i = 0; i < count; ++i) out[i] = first[i];
    for (int32_t r = 1; r < group_->size(); ++r) {
      const float* in = static_cast<const float*>(group_->send_ptr(r)) + begin;
      for (int64_t i = 0; i < count; ++i) out[i] += in[i];
    }
  });
}

absl::Status CpuCommunicator::AllReduce(void* data, int64_t count, CommDType dtype) {
  if (dtype != CommDType::kF32) {
    return absl::InvalidArgumentError("cpu communicator: AllReduce supports f32 only");
  }
  // Rank r owns slice r: it sums that slice over all ranks (fixed order) and writes the result
  // into every rank's buffer. Slices are disjoint, so no two ranks touch the same bytes, and
  // every rank ends with bit-identical data.
  const int32_t n = group_->size();
  const int64_t begin = count * rank_ / n;
  const int64_t end = count * (rank_ + 1) / n;
  scratch_.resize(end - begin);
  return group_->Exchange(rank_, data, data, [&] {
    const float* first = static_cast<const float*>(group_->recv_ptr(0));
    for (int64_t i = begin; i < end; ++i) scratch_[i - begin] = first[i];
    for (int32_t r = 1; r < n; ++r) {
      const float* in = static_cast<const float*>(group_->recv_ptr(r));
      for (int64_t i = begin; i < end; ++i) scratch_[i - begin] += in[i];
    }
    for (int32_t r = 0; r < n; ++r) {
      float* out = static_cast<float*>(group_->recv_ptr(r));
      if (end > begin) std::memcpy(out + begin, scratch_.data(), (end - begin) * sizeof(float));
    }
  });
}

absl::Status CpuCommunicator::Broadcast(void* data, int64_t bytes, int32_t root) {
  if (root < 0 || root >= group_->size()) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " outside group"));
  }
  return group_->Exchange(rank_, data, data, [&] {
    if (rank_ != root && bytes > 0) std::memcpy(data, group_->send_ptr(root), bytes);
  });
}

absl::Status CpuCommunicator::Barrier() {
  return group_->Exchange(rank_, nullptr, nullptr, [] {});
}

std::vector<std::unique_ptr<Communicator>> CreateCpuCommunicators(int32_t size,
                                                                  absl::Duration timeout) {
  auto group = std::make_shared<CpuCommGroup>(size, timeout);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int32_t r = 0; r < size; ++r) out.push_back(std::make_unique<CpuCommunicator>(group, r));
  return out;
}

}  // namespace tandem
