// Piecewise CUDA graphs for the CUDA backend (TANDEM_CUDA_GRAPHS=on,
// docs/gpu.md#cuda-graphs): the backend records the kernel-launching ops between two eager ops
// (attention, KV writes, memory ops, synchronisation) as one *piece* instead of launching them;
// Flush runs the piece — replaying its captured graph, or capturing it, or launching it eagerly —
// before the eager op that ended it. decode_graph_plan.h says when each happens.
//
// * Recording: Stage copies an op's host metadata (token ids, positions, gather indices) into
//   the piece's blob and returns its offset; the op's closure later receives the device address
//   of that blob, so metadata values change between replays without changing the graph: before
//   each replay the blob is copied into the graph's own fixed-address arena (pinned host →
//   device, on the stream, ahead of the graph launch).
// * Capture: cudaStreamBeginCapture (thread-local mode) on the backend's stream, the closures,
//   cudaStreamEndCapture, instantiate. Any failure (an op that would synchronise or allocate
//   inside capture, an error) discards the capture and runs the closures eagerly: a piece always
//   runs once. Keys that failed to capture are not retried until the next invalidation.
// * Invalidation: InvalidateAll (the backend calls it when a scratch buffer that captured kernels
//   point at is reallocated) destroys every graph and starts a new layout generation.
// * Bounded: DecodeGraphCache's count and byte limits; evicted executables are destroyed at once.
//
// Thread-safety: one owner thread (the backend's); everything enqueues on its stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/cuda/cuda_buffer.h"
#include "common/cuda/cuda_stream.h"
#include "model/cuda/cuda_backend_options.h"
#include "model/cuda/decode_graph_plan.h"

namespace tandem::gpu {

class GraphRunner {
 public:
  // Runs one op of a piece; `meta` is the device address of the piece's metadata blob.
  using Op = std::function<absl::Status(const char* meta)>;

  static absl::StatusOr<std::unique_ptr<GraphRunner>> Create(int32_t device, cudaStream_t stream,
                                                             const CudaBackendOptions& options,
                                                             absl::Duration timeout);
  ~GraphRunner();
  GraphRunner(const GraphRunner&) = delete;
  GraphRunner& operator=(const GraphRunner&) = delete;

  // Whether an op over `rows` rows is recorded: a piece starts only with an op whose rows are a
  // batch bucket (DecodeBatchBuckets of max_graph_batch; the engine pads one-rank steps to
  // PaddedRows), so graphs exist per bucket and larger steps run eagerly; once a piece is
  // pending, every recordable op joins it (e.g. Qwen3's per-head norm over rows × heads).
  bool Records(int64_t rows) const {
    return !ops_.empty() ||
           ChooseBucket(buckets_, rows) == std::optional<int32_t>(static_cast<int32_t>(rows));
  }
  // The bucket a step of `rows` rows runs in; rows itself above the largest bucket.
  int64_t PaddedRows(int64_t rows) const { return ChooseBucket(buckets_, rows).value_or(rows); }

  // Appends host bytes to the pending piece's metadata blob; the offset (16-byte aligned).
  int64_t Stage(const void* host, int64_t bytes);
  // Appends an op of `rows` rows with its signature words (kind, sizes, device pointers).
  void Record(int64_t rows, std::initializer_list<int64_t> signature, Op op);

  // Runs the pending piece (nothing when empty). Call before any op that is not recorded.
  absl::Status Flush();

  // Destroys every captured graph (a captured address is going away).
  void InvalidateAll();

  struct Stats {
    int64_t replays = 0, captures = 0, eager = 0, capture_failures = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    std::unique_ptr<PinnedBuffer> host;
    std::unique_ptr<CudaDeviceBuffer> device;
    std::unique_ptr<CudaEvent> copied;  // the last arena copy from `host` is done
    bool copy_pending = false;
  };
  // A device arena (and its pinned host side) for eager pieces, grow-only.
  struct Arena {
    std::unique_ptr<PinnedBuffer> host;
    std::unique_ptr<CudaDeviceBuffer> device;
    std::unique_ptr<CudaEvent> copied;
    bool copy_pending = false;
  };

  GraphRunner(int32_t device, cudaStream_t stream, const CudaBackendOptions& options,
              absl::Duration timeout, std::vector<int32_t> buckets)
      : device_(device),
        stream_(stream),
        options_(options),
        timeout_(timeout),
        buckets_(std::move(buckets)),
        cache_(options.max_graphs, options.max_graph_bytes) {}

  absl::Status RunOps(const char* meta);
  absl::StatusOr<const char*> UploadEager();
  absl::Status Upload(PinnedBuffer& host, CudaDeviceBuffer& device, CudaEvent& copied,
                      bool& copy_pending);
  absl::Status Capture(const DecodeGraphKey& key);
  void Destroy(uint64_t id);

  const int32_t device_;
  const cudaStream_t stream_;
  const CudaBackendOptions options_;
  const absl::Duration timeout_;
  const std::vector<int32_t> buckets_;
  DecodeGraphCache cache_;
  absl::flat_hash_map<uint64_t, Graph> graphs_;
  absl::flat_hash_set<DecodeGraphKey> uncapturable_;
  Arena eager_;
  Stats stats_;

  // The pending piece.
  std::vector<char> blob_;
  std::vector<Op> ops_;
  PieceSignature signature_;
  int64_t rows_ = 0;
};

}  // namespace tandem::gpu
