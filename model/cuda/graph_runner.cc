#include "model/cuda/graph_runner.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_device.h"
#include "common/cuda/cuda_status.h"
#include "common/status_macros.h"

namespace tandem::gpu {
namespace {

constexpr int64_t kAlign = 16;

}  // namespace

absl::StatusOr<std::unique_ptr<GraphRunner>> GraphRunner::Create(int32_t device,
                                                                 cudaStream_t stream,
                                                                 const CudaBackendOptions& options,
                                                                 absl::Duration timeout) {
  if (options.max_graph_batch < 1 || options.max_graphs < 1 || options.max_graph_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuda graphs: max_graph_batch ", options.max_graph_batch, ", max_graphs ",
        options.max_graphs, ", max_graph_bytes ", options.max_graph_bytes, " must be >= 1"));
  }
  TANDEM_ASSIGN_OR_RETURN(std::vector<int32_t> buckets,
                          DecodeBatchBuckets(options.max_graph_batch));
  auto r = std::unique_ptr<GraphRunner>(
      new GraphRunner(device, stream, options, timeout, std::move(buckets)));
  TANDEM_ASSIGN_OR_RETURN(r->eager_.copied, CudaEvent::Create(device));
  return r;
}

GraphRunner::~GraphRunner() {
  const ScopedDevice scope(device_);
  for (auto& [id, g] : graphs_) {
    if (g.exec != nullptr) (void)cudaGraphExecDestroy(g.exec);
  }
}

int64_t GraphRunner::Stage(const void* host, int64_t bytes) {
  const int64_t offset = (static_cast<int64_t>(blob_.size()) + kAlign - 1) / kAlign * kAlign;
  blob_.resize(offset + std::max<int64_t>(bytes, 0));
  if (bytes > 0) std::memcpy(blob_.data() + offset, host, bytes);
  return offset;
}

void GraphRunner::Record(int64_t rows, std::initializer_list<int64_t> signature, Op op) {
  if (ops_.empty()) rows_ = rows;
  signature_.Add(signature);
  ops_.push_back(std::move(op));
}

absl::Status GraphRunner::RunOps(const char* meta) {
  for (const Op& op : ops_) TANDEM_RETURN_IF_ERROR(op(meta));
  return absl::OkStatus();
}

absl::Status GraphRunner::Upload(PinnedBuffer& host, CudaDeviceBuffer& device, CudaEvent& copied,
                                 bool& copy_pending) {
  if (blob_.empty()) return absl::OkStatus();
  if (copy_pending) {
    // The previous copy from this pinned buffer must have read it before it is overwritten.
    TANDEM_RETURN_IF_ERROR(PollUntilDone([&] { return cudaEventQuery(copied.get()); }, timeout_,
                                         "cuda graphs: metadata arena copy"));
    copy_pending = false;
  }
  std::memcpy(host.data(), blob_.data(), blob_.size());
  TANDEM_RETURN_IF_CUDA_ERROR(
      cudaMemcpyAsync(device.data(), host.data(), blob_.size(), cudaMemcpyHostToDevice, stream_));
  TANDEM_RETURN_IF_CUDA_ERROR(cudaEventRecord(copied.get(), stream_));
  copy_pending = true;
  return absl::OkStatus();
}

absl::StatusOr<const char*> GraphRunner::UploadEager() {
  const int64_t bytes = std::max<int64_t>(static_cast<int64_t>(blob_.size()), kAlign);
  if (eager_.device == nullptr || eager_.device->bytes() < bytes) {
    if (eager_.copy_pending) {
      TANDEM_RETURN_IF_ERROR(PollUntilDone([&] { return cudaEventQuery(eager_.copied->get()); },
                                           timeout_, "cuda graphs: metadata arena copy"));
      eager_.copy_pending = false;
    }
    eager_.device.reset();
    eager_.host.reset();
    TANDEM_ASSIGN_OR_RETURN(eager_.device, CudaDeviceBuffer::Create(device_, 2 * bytes));
    TANDEM_ASSIGN_OR_RETURN(eager_.host, PinnedBuffer::Create(2 * bytes));
  }
  TANDEM_RETURN_IF_ERROR(Upload(*eager_.host, *eager_.device, *eager_.copied, eager_.copy_pending));
  return static_cast<const char*>(eager_.device->data());
}

absl::Status GraphRunner::Capture(const DecodeGraphKey& key) {
  const int64_t bytes = std::max<int64_t>(static_cast<int64_t>(blob_.size()), kAlign);
  Graph g;
  // Everything the graph points at is allocated before capture begins.
  TANDEM_ASSIGN_OR_RETURN(g.host, PinnedBuffer::Create(bytes));
  TANDEM_ASSIGN_OR_RETURN(g.device, CudaDeviceBuffer::Create(device_, bytes));
  TANDEM_ASSIGN_OR_RETURN(g.copied, CudaEvent::Create(device_));
  TANDEM_RETURN_IF_CUDA_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const absl::Status ran = RunOps(static_cast<const char*>(g.device->data()));
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (!ran.ok() || ended != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // a capture-time error must not surface at the next launch
    return ran.ok() ? ToStatus(ended, "cudaStreamEndCapture") : ran;
  }
  const cudaError_t inst = cudaGraphInstantiate(&g.exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    (void)cudaGetLastError();
    return ToStatus(inst, "cudaGraphInstantiate");
  }
  absl::StatusOr<DecodeGraphCache::Admission> admitted = cache_.Insert(key, 2 * bytes);
  if (!admitted.ok()) {
    (void)cudaGraphExecDestroy(g.exec);
    return admitted.status();
  }
  for (uint64_t id : admitted->evicted) Destroy(id);
  Graph& kept = graphs_[admitted->id] = std::move(g);
  TANDEM_RETURN_IF_ERROR(Upload(*kept.host, *kept.device, *kept.copied, kept.copy_pending));
  TANDEM_RETURN_IF_CUDA_ERROR(cudaGraphLaunch(kept.exec, stream_));
  ++stats_.captures;
  return absl::OkStatus();
}

void GraphRunner::Destroy(uint64_t id) {
  auto it = graphs_.find(id);
  if (it == graphs_.end()) return;
  // In-flight launches of the executable complete first; the arena buffers' frees wait for the
  // device (cuda_buffer.h).
  if (it->second.exec != nullptr) (void)cudaGraphExecDestroy(it->second.exec);
  graphs_.erase(it);
}

void GraphRunner::InvalidateAll() {
  for (uint64_t id : cache_.InvalidateAll()) Destroy(id);
  uncapturable_.clear();
}

absl::Status GraphRunner::Flush() {
  if (ops_.empty()) return absl::OkStatus();
  const DecodeGraphKey key{static_cast<int32_t>(rows_), static_cast<uint8_t>(options_.activations),
                           cache_.generation(), signature_.value()};
  absl::Status status;
  if (const std::optional<uint64_t> id = cache_.Find(key)) {
    Graph& g = graphs_.at(*id);
    status = Upload(*g.host, *g.device, *g.copied, g.copy_pending);
    if (status.ok()) status = ToStatus(cudaGraphLaunch(g.exec, stream_), "cudaGraphLaunch");
    ++stats_.replays;
  } else {
    bool done = false;
    if (cache_.warm(key) && !uncapturable_.contains(key)) {
      const absl::Status captured = Capture(key);
      done = captured.ok();
      if (!done) {
        uncapturable_.insert(key);
        ++stats_.capture_failures;
      }
    } else {
      cache_.NoteEager(key);
    }
    if (!done) {
      absl::StatusOr<const char*> meta = UploadEager();
      status = meta.ok() ? RunOps(*meta) : meta.status();
      ++stats_.eager;
    }
  }
  blob_.clear();
  ops_.clear();
  signature_ = PieceSignature();
  rows_ = 0;
  return status;
}

}  // namespace tandem::gpu
