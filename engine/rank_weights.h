// One rank's share of the model weights, prepared on its backend (TP sharding:
// docs/design.md#model-and-compute).
//
// * Column-parallel: wq (the rank's query heads), wk/wv (its KV heads — replicated rows when
//   tp > num_kv_heads), w_gate/w_up (a contiguous slice of the intermediate dimension; slices may
//   differ by one row when tp does not divide it, e.g. SmolLM2's 1536 over tp=9).
// * Row-parallel: wo (the columns of its query heads), w_down (the columns of its intermediate
//   slice); their partial outputs are all-reduced over the TP group.
// * Embedding: replicated. A lookup costs nothing and needs no collective; ranks on one device
//   share a single copy (the weight cache), so a 9-rank CPU instance holds it once.
// * LM head: vocab-parallel (rank t computes logits for vocab slice t, zero-padded to the
//   largest slice so the all-gather has equal counts). It is the largest GEMM of small models
//   (SmolLM2: 49152×576), so replicating it would multiply its cost by tp.
//
// Prepared tensors are shared between ranks whose backends report the same device_key (all CPU
// ranks of a process; PCP peers with the same TP index hold identical slices).
//
// Quantised matrices (Tensor::quantized) reach backends that keep them (PrepareQuantizedLinear)
// in their block format, sliced on block boundaries: a rank's rows are whole rows, and a
// row-parallel slice (wo, w_down) keeps its blocks when its column range starts and ends on a
// block boundary. When it would cut through a block (e.g. w_down's 1536 columns over tp=9 with
// 32-element blocks, or Q4_K's 256-element super-blocks) that tensor's slice is dequantised to
// f32 instead — exact either way — and listed in RankWeights::f32_fallbacks. Backends that keep
// no blocks (CUDA) get every slice dequantised, as before. The embedding table stays quantised
// when the backend can read its rows (CanReadLinearRows); with tied embeddings and tp = 1 it is
// the LM head's own prepared matrix.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "attention/parallel_layout.h"
#include "model/backend.h"
#include "model/format/llama_weights.h"

namespace tandem {

struct RankLayerWeights {
  std::shared_ptr<const DeviceBuffer> attn_norm;
  std::shared_ptr<const DeviceBuffer> ffn_norm;
  // Per-head Q/K RMSNorm weights [head_dim] (qwen3), replicated on every rank; null when the
  // model has none.
  std::shared_ptr<const DeviceBuffer> q_norm, k_norm;
  std::shared_ptr<const LinearOp> wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct RankWeights {
  // [vocab][hidden], replicated: an f32 buffer, or (embedding_rows set) a prepared matrix read
  // with ComputeBackend::LinearRows.
  std::shared_ptr<const DeviceBuffer> embedding;
  std::shared_ptr<const LinearOp> embedding_rows;
  std::shared_ptr<const DeviceBuffer> output_norm;
  std::shared_ptr<const LinearOp> lm_head;  // [vocab_slice_max][hidden]
  int64_t vocab_begin = 0;                  // first vocab id of this rank's slice
  int64_t vocab_count = 0;                  // ids in this rank's slice
  int64_t vocab_slice_max = 0;              // padded slice width (max over TP ranks)
  int64_t intermediate_begin = 0;
  int64_t intermediate_count = 0;
  std::vector<RankLayerWeights> layers;
  // Bytes this rank's weights hold (each prepared tensor once, shared ones included).
  int64_t resident_bytes = 0;
  // Quantised tensors whose slice for this rank had to be dequantised, with the reason: one line
  // per tensor kind, with the number of layers it applies to.
  std::vector<std::string> f32_fallbacks;
};

// Caches prepared tensors by (device key, tensor, slice) so ranks on one device share them.
// Thread-safe; concurrent requests for the same key prepare it once.
class WeightCache {
 public:
  using Prepare = std::function<absl::StatusOr<std::shared_ptr<const void>>()>;
  absl::StatusOr<std::shared_ptr<const void>> GetOrPrepare(const std::string& key,
                                                           const Prepare& prepare);

 private:
  struct Entry {
    std::once_flag once;
    absl::StatusOr<std::shared_ptr<const void>> value = absl::UnknownError("unprepared");
  };
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

// Slice [begin, begin+count) of the vocabulary / intermediate dimension for TP rank t of tp.
int64_t SliceBegin(int64_t total, int32_t t, int32_t tp);
int64_t SliceCount(int64_t total, int32_t t, int32_t tp);

absl::StatusOr<RankWeights> PrepareRankWeights(const LlamaWeights& weights,
                                               const ParallelConfig& parallel,
                                               const RankPlacement& placement,
                                               ComputeBackend& backend, WeightCache& cache);

}  // namespace tandem
