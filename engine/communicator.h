// Collectives between the rank threads of one instance (docs/design.md#instances).
//
// A Communicator is one rank's handle on one group (TP, PCP or DCP group of an instance, or the
// whole world). Every member must call the same collectives in the same order with the same
// counts; buffers are device memory of the rank's backend (host memory for the CPU backend).
//
// Semantics (identical for every implementation — in-process CPU and NCCL):
//   AllGather      recv[size·count] = concat over ranks r of send_r[count] (rank-major).
//   ReduceScatter  recv[count] = Σ_r send_r[rank·count .. (rank+1)·count)   (send is size·count)
//   AllReduce      data[count] = Σ_r data_r, in place. Every rank receives bit-identical values
//                  (TP ranks keep identical residual streams).
//   Broadcast      bytes of root's buffer copied into every rank's buffer.
//   Barrier        returns once every member has entered it.
// Sums are computed in a fixed order, identical on every rank, so results are deterministic
// run to run (the CPU implementation sums in rank order; NCCL in its own fixed order).
//
// Errors: a collective returns a non-OK status when the group was aborted (Abort() from any
// member, e.g. because one rank failed) or when peers do not arrive within the group's timeout
// (DEADLINE_EXCEEDED) — a wait is never unbounded. After an error the group is unusable.
//
// Thread-safety: one handle per rank thread; a handle is used by that thread only.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace tandem {

enum class CommDType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8 };

constexpr int64_t CommDTypeBytes(CommDType t) {
  switch (t) {
    case CommDType::kF32:
      return 4;
    case CommDType::kF16:
      return 2;
    case CommDType::kBF16:
      return 2;
    case CommDType::kI32:
      return 4;
    case CommDType::kI64:
      return 8;
    case CommDType::kU8:
      return 1;
  }
  return 1;
}

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;

  [[nodiscard]] virtual absl::Status AllGather(const void* send, void* recv, int64_t count,
                                               CommDType dtype) = 0;
  // Sum-reduction; dtype kF32, kBF16 or kF16 on every implementation (bf16/f16 are summed in
  // f32 and rounded to the dtype as partial sums combine; the engine's bf16 activations use it).
  [[nodiscard]] virtual absl::Status ReduceScatter(const void* send, void* recv, int64_t count,
                                                   CommDType dtype) = 0;
  [[nodiscard]] virtual absl::Status AllReduce(void* data, int64_t count, CommDType dtype) = 0;
  [[nodiscard]] virtual absl::Status Broadcast(void* data, int64_t bytes, int32_t root) = 0;
  [[nodiscard]] virtual absl::Status Barrier() = 0;

  // Makes every pending and future collective of the whole group fail with `reason`.
  virtual void Abort(const absl::Status& reason) = 0;
};

}  // namespace tandem
