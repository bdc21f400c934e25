// The Llama forward pass of one rank of an instance (docs/design.md#parallel-layout,
// #dcp-attention), written once against ComputeBackend and Communicator.
//
// Per step and layer: QKV of the rank's heads for its rows (its PCP chunks) → RoPE → K/V
// all-gathered over the PCP group, each rank writing the positions it owns under DCP → attention
// (DCP: Q all-gathered over the DCP group, local paged attention over the rank's own tokens, LSE
// all-gather + in-place correction, reduce-scatter back to each rank's rows and heads) → O
// projection all-reduced over TP → SwiGLU MLP all-reduced over TP. After the last layer, hidden
// states are all-gathered over PCP and restored to prompt order, the rows that need logits are
// normed and projected on the rank's vocab slice, and slices are all-gathered over TP; global rank
// 0 assembles the full logits.
//
// Thread-safety: a RankModel is used by its rank thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attention/parallel_layout.h"
#include "engine/communicator.h"
#include "engine/rank_weights.h"
#include "engine/step.h"
#include "model/backend.h"

namespace tandem {

struct RankComms {
  std::unique_ptr<Communicator> tp;   // group of ranks with the same PCP index
  std::unique_ptr<Communicator> pcp;  // same TP index
  std::unique_ptr<Communicator> dcp;  // the rank's DCP group, ordered by dcp_rank
};

class RankModel {
 public:
  RankModel(const LlamaConfig& config, const ParallelConfig& parallel,
            const RankPlacement& placement, std::unique_ptr<ComputeBackend> backend,
            RankWeights weights, RankComms comms, KvPoolView pool);

  // Runs the step. On global rank 0, fills logits (host, [plan.logit_rows.size()][vocab]);
  // other ranks leave it untouched.
  absl::Status Forward(const StepPlan& plan, std::vector<float>* logits);

  const RankPlacement& placement() const { return placement_; }
  const KvPoolView& pool() const { return pool_; }
  const RankWeights& weights() const { return weights_; }
  ComputeBackend& backend() { return *backend_; }
  void AbortComms(const absl::Status& reason);

 private:
  // Grow-only device buffers for one step's activations.
  float* Buf(int slot, int64_t floats);
  absl::Status AttentionLayer(const StepPlan& plan, int32_t layer, int64_t rows, int64_t max_rows,
                              float* q, float* attn_out);
  // x += in·Wᵀ over the whole TP group (the O and down projections with their residual add).
  absl::Status ResidualLinear(const LinearOp& op, const float* in, int64_t rows, float* x,
                              float* scratch);
  // ResidualLinear, then the norm (norm_w) of the new x for the next projection; returns where
  // that normed x is: scratch when the backend fuses the add into the norm
  // (ComputeBackend::PrefersAddRmsNorm, tp = 1), else h.
  absl::StatusOr<const float*> ResidualLinearNorm(const LinearOp& op, const float* in, int64_t rows,
                                                  float* x, float* scratch,
                                                  const DeviceBuffer& norm_w, float* h);

  const LlamaConfig config_;
  const ParallelConfig parallel_;
  const RankPlacement placement_;
  std::unique_ptr<ComputeBackend> backend_;
  RankWeights weights_;
  RankComms comms_;
  KvPoolView pool_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  absl::Status buffer_status_;

  // Per-step host metadata (reused vectors).
  std::vector<int32_t> ids_;
  std::vector<int64_t> positions_, kv_slots_, logit_index_;
  std::vector<int32_t> group_request_;
  std::vector<int64_t> group_position_;
};

}  // namespace tandem
