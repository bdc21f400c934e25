// transfer_bench --memory cuda (docs/gpu.md#gpu-direct-kv): the planned pull between two CUDA
// device pools — a source peer process (this executable with --source_peer --memory=cuda) whose
// pools are device memory registered with UCX, and this process's device pool — timed beside
// cudaMemcpyAsync device-to-device of the same copy list in the same pass (the GPU's copy engine
// moving the same bytes inside one process: the limit a transfer over cuda_ipc can approach).
// After one verified warm-up pull (downloaded and checked byte for byte), each timed pass runs
// both back to back; the ratio is the median of per-pass ratios memcpy time / pull time.
//
// Fails UNAVAILABLE "no CUDA device: ..." without a GPU (or in a build without the CUDA
// backend), FAILED_PRECONDITION when the linked UCX reports no CUDA memory type — never a
// number that was not measured.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/transfer/transfer_scenario.h"

namespace tandem::bench {

struct DeviceScenarioResult {
  std::string device_name;
  std::string ucx_memory_types;
  int64_t bytes = 0;             // bytes the destination rank pulls
  int64_t copies = 0;            // planned copies
  Timing planned;                // UcxKvPuller::Execute into the device pool
  Timing memcpy;                 // cudaMemcpyAsync D2D of the same copies
  double planned_vs_memcpy = 0;  // median over passes of memcpy time / planned time
  absl::Duration first_pull;     // warm-up: connection set-up and IPC handle opening included
};

// REQUIRES: scenario.src.world() == scenario.dst.world() == 1 (one GPU). Uses options'
// self_executable, reps, max_in_flight and verify; UCX runs with its default transports (the
// process environment's UCX_* settings apply), which include cuda_ipc and cuda_copy when loaded.
[[nodiscard]] absl::StatusOr<DeviceScenarioResult> RunDeviceScenario(const Scenario& scenario,
                                                                     const ScenarioOptions& options,
                                                                     int32_t device);

// The --source_peer side of --memory=cuda: RunSourcePeer with device pools on `device`.
int RunDeviceSourcePeer(int32_t device);

}  // namespace tandem::bench
