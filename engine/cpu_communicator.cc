#include "engine/cpu_communicator.h"

#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "attention/kv_dtype.h"

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

namespace {

// One element type of a sum: values widen to f32, are added in rank order, and round back to
// the type after every addition — bf16 and f16 partial sums are rounded as NCCL rounds each
// partial sum its ring forwards (NCCL's order is its own, so bf16 sums may differ from NCCL's in
// the last bit; on every rank of one group they are identical, which is what the engine relies
// on). f32 round trips are the identity, so f32 sums are exactly the plain float sums.
struct ReduceType {
  float (*load)(const void* base, int64_t i);
  void (*store)(void* base, int64_t i, float v);
  int64_t bytes;
};

absl::StatusOr<ReduceType> ReduceTypeOf(CommDType t, const char* op) {
  switch (t) {
    case CommDType::kF32:
      return ReduceType{[](const void* b, int64_t i) { return static_cast<const float*>(b)[i]; },
                        [](void* b, int64_t i, float v) { static_cast<float*>(b)[i] = v; }, 4};
    case CommDType::kBF16:
      return ReduceType{
          [](const void* b, int64_t i) { return Bf16ToFloat(static_cast<const uint16_t*>(b)[i]); },
          [](void* b, int64_t i, float v) { static_cast<uint16_t*>(b)[i] = FloatToBf16(v); }, 2};
    case CommDType::kF16:
      return ReduceType{
          [](const void* b, int64_t i) { return HalfToFloat(static_cast<const uint16_t*>(b)[i]); },
          [](void* b, int64_t i, float v) { static_cast<uint16_t*>(b)[i] = FloatToHalf(v); }, 2};
    case CommDType::kI32:
    case CommDType::kI64:
    case CommDType::kU8:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cpu communicator: ", op, " supports f32, bf16 and f16 only"));
}

// out[i] = Σ_r in_r[i] for i in [begin, end), rank order, rounded to `t` after every addition.
void SumRanks(const ReduceType& t, const CpuCommGroup& group, bool from_send, int64_t begin,
              int64_t end, void* out, int64_t out_begin) {
  auto in = [&](int32_t r) { return from_send ? group.send_ptr(r) : group.recv_ptr(r); };
  for (int64_t i = begin; i < end; ++i) t.store(out, out_begin + i - begin, t.load(in(0), i));
  for (int32_t r = 1; r < group.size(); ++r) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t o = out_begin + i - begin;
      t.store(out, o, t.load(out, o) + t.load(in(r), i));
    }
  }
}

}  // namespace

absl::Status CpuCommunicator::ReduceScatter(const void* send, void* recv, int64_t count,
                                            CommDType dtype) {
  absl::StatusOr<ReduceType> t = ReduceTypeOf(dtype, "ReduceScatter");
  if (!t.ok()) return t.status();
  return group_->Exchange(rank_, send, recv, [&] {
    SumRanks(*t, *group_, /*from_send=*/true, rank_ * count, (rank_ + 1) * count, recv, 0);
  });
}

absl::Status CpuCommunicator::AllReduce(void* data, int64_t count, CommDType dtype) {
  absl::StatusOr<ReduceType> t = ReduceTypeOf(dtype, "AllReduce");
  if (!t.ok()) return t.status();
  // Rank r owns slice r: it sums that slice over all ranks (fixed order) and writes the result
  // into every rank's buffer. Slices are disjoint, so no two ranks touch the same bytes, and
  // every rank ends with bit-identical data.
  const int32_t n = group_->size();
  const int64_t begin = count * rank_ / n;
  const int64_t end = count * (rank_ + 1) / n;
  const int64_t bytes = (end - begin) * t->bytes;
  scratch_.resize(static_cast<size_t>((bytes + 3) / 4));
  return group_->Exchange(rank_, data, data, [&] {
    SumRanks(*t, *group_, /*from_send=*/false, begin, end, scratch_.data(), 0);
    for (int32_t r = 0; r < n; ++r) {
      char* out = static_cast<char*>(group_->recv_ptr(r));
      if (bytes > 0) std::memcpy(out + begin * t->bytes, scratch_.data(), bytes);
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
