#include "engine/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/cuda/cuda_buffer.h"
#include "common/cuda/cuda_device.h"
#include "common/cuda/cuda_status.h"
#include "common/cuda/cuda_stream.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

using gpu::CudaDeviceBuffer;
using gpu::CudaEvent;
using gpu::ScopedDevice;

// NCCL reports "not done yet" through ncclCommGetAsyncError; map it to CUDA's not-ready code so
// one poll loop (gpu::PollUntilDone) serves both.
cudaError_t CommReady(ncclComm_t comm, ncclResult_t* failure) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  if (r != ncclSuccess) state = r;
  if (state == ncclInProgress) return cudaErrorNotReady;
  *failure = state;
  return cudaSuccess;
}

absl::StatusOr<ncclDataType_t> ReductionType(CommDType t) {
  switch (t) {
    case CommDType::kF32:
      return ncclFloat32;
    case CommDType::kF16:
      return ncclFloat16;
    case CommDType::kBF16:
      return ncclBfloat16;
    case CommDType::kI32:
      return ncclInt32;
    case CommDType::kI64:
      return ncclInt64;
    case CommDType::kU8:
      break;
  }
  return absl::InvalidArgumentError("nccl communicator: sums support f32, f16, bf16, i32, i64");
}

// Shared by the members of one group: the first error or Abort() reason.
class NcclGroup {
 public:
  void Abort(const absl::Status& reason) {
    absl::MutexLock lock(&mu_);
    if (aborted_.ok()) aborted_ = reason.ok() ? absl::AbortedError("communicator aborted") : reason;
  }
  absl::Status status() {
    absl::MutexLock lock(&mu_);
    return aborted_;
  }

 private:
  absl::Mutex mu_;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclGroup> group, int32_t rank, int32_t size, int32_t device,
                   absl::Duration timeout)
      : group_(std::move(group)), rank_(rank), size_(size), device_(device), timeout_(timeout) {}

  // Takes ownership of `comm` (a communicator whose initialisation has completed).
  absl::Status Init(ncclComm_t comm) {
    comm_ = comm;
    TANDEM_ASSIGN_OR_RETURN(done_, CudaEvent::Create(device_));
    TANDEM_ASSIGN_OR_RETURN(barrier_word_, CudaDeviceBuffer::Create(device_, sizeof(int32_t)));
    const ScopedDevice scope(device_);
    TANDEM_RETURN_IF_ERROR(scope.status());
    TANDEM_RETURN_IF_CUDA_ERROR(cudaMemset(barrier_word_->data(), 0, sizeof(int32_t)));
    return absl::OkStatus();
  }

  ~NcclCommunicator() override { AbortLocal(); }

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }

  absl::Status AllGather(const void* send, void* recv, int64_t count, CommDType dtype) override {
    if (count <= 0) return Empty("AllGather", count);
    const size_t bytes = static_cast<size_t>(count * CommDTypeBytes(dtype));
    return Run("AllGather", [&](cudaStream_t s) {
      return ncclAllGather(send, recv, bytes, ncclUint8, comm_, s);
    });
  }

  absl::Status ReduceScatter(const void* send, void* recv, int64_t count,
                             CommDType dtype) override {
    TANDEM_ASSIGN_OR_RETURN(const ncclDataType_t type, ReductionType(dtype));
    if (count <= 0) return Empty("ReduceScatter", count);
    return Run("ReduceScatter", [&](cudaStream_t s) {
      return ncclReduceScatter(send, recv, static_cast<size_t>(count), type, ncclSum, comm_, s);
    });
  }

  absl::Status AllReduce(void* data, int64_t count, CommDType dtype) override {
    TANDEM_ASSIGN_OR_RETURN(const ncclDataType_t type, ReductionType(dtype));
    if (count <= 0) return Empty("AllReduce", count);
    return Run("AllReduce", [&](cudaStream_t s) {
      return ncclAllReduce(data, data, static_cast<size_t>(count), type, ncclSum, comm_, s);
    });
  }

  absl::Status Broadcast(void* data, int64_t bytes, int32_t root) override {
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " outside group"));
    }
    if (bytes <= 0) return Empty("Broadcast", bytes);
    return Run("Broadcast", [&](cudaStream_t s) {
      return ncclBroadcast(data, data, static_cast<size_t>(bytes), ncclUint8, root, comm_, s);
    });
  }

  absl::Status Barrier() override {
    return Run("Barrier", [&](cudaStream_t s) {
      return ncclAllReduce(barrier_word_->data(), barrier_word_->data(), 1, ncclInt32, ncclSum,
                           comm_, s);
    });
  }

  void Abort(const absl::Status& reason) override { group_->Abort(reason); }

 private:
  // A collective of no elements still synchronises the group, as on the CPU (NCCL may treat
  // zero counts as a no-op); negative counts are rejected.
  absl::Status Empty(absl::string_view op, int64_t count) {
    if (count < 0) {
      return absl::InvalidArgumentError(absl::StrCat("nccl ", op, ": negative count ", count));
    }
    return Barrier();
  }

  template <typename Enqueue>
  absl::Status Run(absl::string_view op, const Enqueue& enqueue) {
    absl::Status s = RunOnce(op, enqueue);
    if (!s.ok()) {
      group_->Abort(s);
      AbortLocal();
      return group_->status();
    }
    return s;
  }

  template <typename Enqueue>
  absl::Status RunOnce(absl::string_view op, const Enqueue& enqueue) {
    TANDEM_RETURN_IF_ERROR(group_->status());
    if (comm_ == nullptr) return absl::AbortedError("nccl communicator was aborted");
    const ScopedDevice scope(device_);
    TANDEM_RETURN_IF_ERROR(scope.status());
    const std::shared_ptr<gpu::CudaStream> bound = gpu::StreamBoundToThisThread();
    const cudaStream_t stream =
        bound != nullptr && bound->device() == device_ ? bound->get() : cudaStreamPerThread;
    const std::string what =
        absl::StrCat("nccl ", op, " (rank ", rank_, " of ", size_, ", device ", device_, ")");
    const absl::Time deadline = absl::Now() + timeout_;
    auto peers_or_abort = [&]() -> absl::Status { return group_->status(); };

    // Non-blocking communicator: the enqueue itself may finish asynchronously.
    const ncclResult_t r = enqueue(stream);
    if (r != ncclSuccess && r != ncclInProgress) return ToStatus(r, what);
    ncclResult_t failure = ncclSuccess;
    TANDEM_RETURN_IF_ERROR(gpu::PollUntilDone([&] { return CommReady(comm_, &failure); },
                                              peers_or_abort, deadline - absl::Now(),
                                              absl::StrCat(what, ": enqueue")));
    TANDEM_RETURN_IF_ERROR(ToStatus(failure, what));

    TANDEM_RETURN_IF_CUDA_ERROR(cudaEventRecord(done_->get(), stream));
    // Completion: the event, while watching for NCCL's asynchronous errors and group aborts.
    auto errors_or_abort = [&]() -> absl::Status {
      TANDEM_RETURN_IF_ERROR(group_->status());
      ncclResult_t async = ncclSuccess;
      if (CommReady(comm_, &async) == cudaSuccess) return ToStatus(async, what);
      return absl::OkStatus();
    };
    const absl::Status done = gpu::PollUntilDone([&] { return cudaEventQuery(done_->get()); },
                                                 errors_or_abort, deadline - absl::Now(), what);
    if (absl::IsDeadlineExceeded(done)) {
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": peers did not complete the collective within ", absl::FormatDuration(timeout_)));
    }
    return done;
  }

  // Tears down this member's NCCL communicator (bounded; aborts kernels still waiting on peers).
  void AbortLocal() {
    if (comm_ == nullptr) return;
    const ScopedDevice scope(device_);
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  const std::shared_ptr<NcclGroup> group_;
  const int32_t rank_;
  const int32_t size_;
  const int32_t device_;
  const absl::Duration timeout_;
  ncclComm_t comm_ = nullptr;
  std::unique_ptr<CudaEvent> done_;
  std::unique_ptr<CudaDeviceBuffer> barrier_word_;
};

}  // namespace

absl::Status ToStatus(ncclResult_t result, absl::string_view context) {
  if (result == ncclSuccess) return absl::OkStatus();
  const std::string message =
      absl::StrCat(context, ": NCCL error ", static_cast<int>(result), " (",
                   ncclGetErrorString(result), "): ", ncclGetLastError(nullptr));
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclSystemError:
    case ncclRemoteError:
    case ncclUnhandledCudaError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateNcclCommunicators(
    const std::vector<int32_t>& devices, absl::Duration timeout) {
  const int32_t n = static_cast<int32_t>(devices.size());
  if (n == 0) return absl::InvalidArgumentError("nccl communicator: empty group");
  if (std::set<int32_t>(devices.begin(), devices.end()).size() != devices.size()) {
    return absl::InvalidArgumentError(
        "nccl communicator: a group lists a device twice (NCCL needs one GPU per member)");
  }
  for (int32_t d : devices) TANDEM_RETURN_IF_ERROR(gpu::CheckCudaDevice(d));

  auto group = std::make_shared<NcclGroup>();
  std::vector<std::unique_ptr<NcclCommunicator>> members;
  for (int32_t r = 0; r < n; ++r) {
    members.push_back(std::make_unique<NcclCommunicator>(group, r, n, devices[r], timeout));
  }
  ncclUniqueId id;
  TANDEM_RETURN_IF_ERROR(ToStatus(ncclGetUniqueId(&id), "ncclGetUniqueId"));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every NCCL call returns at once; we poll with a deadline
  std::vector<ncclComm_t> comms(n, nullptr);
  TANDEM_RETURN_IF_ERROR(ToStatus(ncclGroupStart(), "ncclGroupStart"));
  absl::Status init;
  for (int32_t r = 0; r < n && init.ok(); ++r) {
    const ScopedDevice scope(devices[r]);
    init = scope.status();
    if (!init.ok()) break;
    const ncclResult_t res = ncclCommInitRankConfig(&comms[r], n, id, r, &config);
    if (res != ncclSuccess && res != ncclInProgress) {
      init = ToStatus(res, absl::StrCat("ncclCommInitRankConfig(rank ", r, ")"));
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  if (init.ok() && end != ncclSuccess && end != ncclInProgress)
    init = ToStatus(end, "ncclGroupEnd");
  const absl::Time deadline = absl::Now() + timeout;
  for (int32_t r = 0; r < n; ++r) {
    if (comms[r] == nullptr) continue;
    if (init.ok()) {
      ncclResult_t failure = ncclSuccess;
      init =
          gpu::PollUntilDone([&] { return CommReady(comms[r], &failure); }, deadline - absl::Now(),
                             absl::StrCat("nccl communicator init (rank ", r, " of ", n, ")"));
      if (init.ok()) init = ToStatus(failure, absl::StrCat("ncclCommInitRankConfig(rank ", r, ")"));
    }
    // Hand every created comm to its member even after a failure: members abort their comm on
    // destruction, so nothing leaks when this returns an error.
    const absl::Status s = members[r]->Init(comms[r]);
    if (init.ok()) init = s;
  }
  if (!init.ok()) return init;  // members (and their comms) are aborted on destruction
  std::vector<std::unique_ptr<Communicator>> out;
  for (auto& m : members) out.push_back(std::move(m));
  return out;
}

}  // namespace tandem
