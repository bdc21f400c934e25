#include "bench/transfer/device_scenario.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/dcp_layout.h"
#include "bench/transfer/device_memory.h"
#include "common/status_macros.h"
#include "kv_transfer/planner.h"
#include "kv_transfer/ucx/kv_puller.h"
#include "kv_transfer/ucx/testing/kv_pattern.h"
#include "kv_transfer/ucx/testing/source_peer.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "kv_transfer/ucx/ucx_worker.h"

namespace tandem::bench {
namespace {

KvPoolAllocator DeviceAllocator(int32_t device) {
  return [device](int32_t, int64_t bytes) { return AllocateDeviceMemory(device, bytes); };
}

}  // namespace

int RunDeviceSourcePeer(int32_t device) {
  const testing::SourcePeerDevice peer{DeviceAllocator(device), &CopyToDevice};
  return testing::RunSourcePeer(testing::kPeerInFd, testing::kPeerOutFd, &peer);
}

absl::StatusOr<DeviceScenarioResult> RunDeviceScenario(const Scenario& sc,
                                                       const ScenarioOptions& options,
                                                       int32_t device) {
  if (sc.src.world() != 1 || sc.dst.world() != 1) {
    return absl::InvalidArgumentError("--memory=cuda times one source and one destination rank");
  }
  DeviceScenarioResult out;
  TANDEM_RETURN_IF_ERROR(CudaDeviceAvailable(device, &out.device_name));
  {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxContext> probe, UcxContext::Create(UcxOptions{}));
    out.ucx_memory_types = probe->memory_type_names();
    if (!probe->supports_cuda_memory()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the linked UCX reports no CUDA memory type (memory types: ", out.ucx_memory_types,
          "): build with -DTANDEM_UCX_ROOT=$(deploy/fetch-ucx-cuda.sh) (docs/gpu.md)"));
    }
  }

  const testing::SourcePeerConfig config = SourceConfigFor(sc, "bench-device-" + sc.name);
  const std::vector<int32_t> dst_blocks = DestinationBlocksFor(sc);
  testing::SourcePeerProcess::Options peer_options;
  peer_options.executable = options.self_executable;
  peer_options.args = {"--source_peer", "--memory=cuda", absl::StrCat("--device=", device)};
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<testing::SourcePeerProcess> peer,
                          testing::SourcePeerProcess::Spawn(peer_options, config));
  const TransferMetadata& metadata = peer->metadata();
  if (metadata.ranks[0].memory_type != KvMemoryType::kCuda) {
    return absl::InternalError("the source peer published a host pool for --memory=cuda");
  }
  TANDEM_RETURN_IF_ERROR(CheckHandshake(CompatibilityHash("bench-model", sc.dst), metadata));
  TANDEM_ASSIGN_OR_RETURN(TransferPlan plan, PlanKvTransfer(metadata.layout, config.blocks, sc.dst,
                                                            dst_blocks, sc.tokens));
  const std::vector<TransferCopy>& copies = plan.copies[0];
  out.bytes = plan.total_bytes();
  out.copies = plan.total_copies();

  UcxKvPullerOptions puller_options;
  puller_options.device_pools = DeviceAllocator(device);
  puller_options.device = device;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<UcxKvPuller> puller, UcxKvPuller::Create(puller_options));
  const int64_t dst_bytes = testing::PoolBytesForBlocks(sc.dst, dst_blocks);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<KvPoolMemory> pool, puller->AllocatePool(dst_bytes));
  const absl::Span<std::byte> local(static_cast<std::byte*>(pool->base()),
                                    static_cast<size_t>(dst_bytes));
  std::vector<std::byte> host(static_cast<size_t>(dst_bytes));
  testing::PoisonPool(absl::MakeSpan(host));
  TANDEM_RETURN_IF_ERROR(CopyToDevice(local.data(), host.data(), dst_bytes));

  PullOptions pull;
  pull.max_in_flight = options.max_in_flight;
  pull.stall_timeout = absl::Seconds(30);
  const absl::Time first = absl::Now();
  TANDEM_RETURN_IF_ERROR(puller->Execute(metadata, copies, local, pull));
  out.first_pull = absl::Now() - first;
  if (options.verify) {
    TANDEM_RETURN_IF_ERROR(CopyToHost(host.data(), local.data(), dst_bytes));
    TANDEM_RETURN_IF_ERROR(
        testing::VerifyDestinationPool(sc.dst, 0, dst_blocks, sc.tokens, absl::MakeSpan(host)));
  }

  // The baseline's buffers: a device copy of the source pool's size and a destination.
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<KvPoolMemory> memcpy_src,
                          AllocateDeviceMemory(device, metadata.ranks[0].pool_bytes));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<KvPoolMemory> memcpy_dst,
                          AllocateDeviceMemory(device, dst_bytes));
  TANDEM_RETURN_IF_ERROR(
      TimeDeviceCopies(device, memcpy_src->base(), memcpy_dst->base(), copies).status());

  std::vector<absl::Duration> planned, copied;
  std::vector<double> ratios;
  for (int32_t rep = 0; rep < options.reps; ++rep) {
    const absl::Time start = absl::Now();
    TANDEM_RETURN_IF_ERROR(puller->Execute(metadata, copies, local, pull));
    planned.push_back(absl::Now() - start);
    TANDEM_ASSIGN_OR_RETURN(
        absl::Duration d, TimeDeviceCopies(device, memcpy_src->base(), memcpy_dst->base(), copies));
    copied.push_back(d);
    ratios.push_back(absl::ToDoubleSeconds(d) / absl::ToDoubleSeconds(planned.back()));
  }
  std::sort(ratios.begin(), ratios.end());
  out.planned = Summarise(planned);
  out.memcpy = Summarise(copied);
  out.planned_vs_memcpy = ratios[ratios.size() / 2];
  TANDEM_RETURN_IF_ERROR(peer->Shutdown(absl::Seconds(10)).status());
  return out;
}

}  // namespace tandem::bench
