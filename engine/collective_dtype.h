// The element type each collective of RankModel's forward moves (docs/gpu.md#multi-rank-instances).
//
// Activations travel in the backend's activation dtype (ComputeBackend::activation_dtype()):
// with bf16 activations every activation buffer holds bf16 in the first half of the floats the
// engine sizes, so a bf16 collective of `count` elements moves exactly those values, and rank r's
// part of an all-gather lands at element r·count of the bf16 buffer the next op reads — the same
// layout as in f32, half the bytes. The sums (TP all-reduce, DCP reduce-scatter) are then bf16
// sums on every communicator (engine/communicator.h). The attention LSEs and the logits stay f32
// in either mode (the backend writes them f32: Attention's lse, LinearF32Out).
//
// Pure; thread-safe.
#pragma once

#include <cstdint>

#include "engine/communicator.h"
#include "model/backend.h"

namespace tandem {

enum class Collective : uint8_t {
  kTpResidualAllReduce,     // x + Σ partial products of the O and down projections
  kPcpKvAllGather,          // k and v rows of every PCP peer (each rank writes what it owns)
  kPcpHiddenAllGather,      // the last layer's hidden rows, before the logits
  kDcpQueryAllGather,       // q of every DCP member's rows
  kDcpLseAllGather,         // the members' attention LSEs
  kDcpOutputReduceScatter,  // the corrected partial attention outputs, summed
  kTpLogitsAllGather,       // the vocab slices of the logits
};

constexpr CommDType CollectiveDType(Collective c, ActivationDType activations) {
  const CommDType act = activations == ActivationDType::kBF16 ? CommDType::kBF16 : CommDType::kF32;
  switch (c) {
    case Collective::kTpResidualAllReduce:
    case Collective::kPcpKvAllGather:
    case Collective::kPcpHiddenAllGather:
    case Collective::kDcpQueryAllGather:
    case Collective::kDcpOutputReduceScatter:
      return act;
    case Collective::kDcpLseAllGather:
    case Collective::kTpLogitsAllGather:
      return CommDType::kF32;
  }
  return CommDType::kF32;
}

}  // namespace tandem
