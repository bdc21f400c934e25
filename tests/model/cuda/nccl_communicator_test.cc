// The NCCL communicator against the in-process CPU communicator: same inputs, same collectives,
// one thread per rank with its own CUDA backend (whose stream the communicator adopts).
// Multi-rank tests need one GPU per rank and skip (visibly) with fewer.
//
// Tolerances: AllGather and Broadcast move bytes and must be exact. Sums of f32 may differ from
// the CPU communicator's rank-order sums in rounding only: |Δ| <= 1e-6 · Σ|x_r|; f16/bf16 sums are
// checked against a double sum with 2 ulp of the result type.
// (This file tests engine/nccl_communicator; it lives here because tests/engine/ is not a CUDA
// folder.)
#include "engine/nccl_communicator.h"

#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "attention/kv_dtype.h"
#include "engine/cpu_communicator.h"
#include "gtest/gtest.h"
#include "model/cuda/cuda_backend.h"
#include "tests/attention/cuda/cuda_test_util.h"
#include "tests/model/cuda/backend_test_util.h"

namespace tandem {
namespace {

using testing::Get;
using testing::Put;
using testing::RandomFloats;

// Runs body(rank) on `size` threads and joins them.
void RunRanks(int32_t size, const std::function<void(int32_t)>& body) {
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < size; ++r) threads.emplace_back(body, r);
  for (std::thread& t : threads) t.join();
}

class NcclCommunicatorTest : public testing::CudaTest {
 protected:
  // Skips unless `ranks` GPUs are present.
  bool NeedGpus(int32_t ranks) {
    if (testing::CudaDeviceCount() >= ranks) return true;
    return false;
  }

  std::vector<std::unique_ptr<Communicator>> MakeComms(int32_t size, absl::Duration timeout) {
    std::vector<int32_t> devices(size);
    for (int32_t r = 0; r < size; ++r) devices[r] = r;
    absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> c =
        CreateNcclCommunicators(devices, timeout);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return {};
    return std::move(c).value();
  }

  // Every collective on f32 data through NCCL and through the CPU communicator.
  void CompareWithCpu(int32_t size) {
    std::vector<std::unique_ptr<Communicator>> nccl = MakeComms(size, absl::Seconds(60));
    ASSERT_EQ(static_cast<int32_t>(nccl.size()), size);
    std::vector<std::unique_ptr<Communicator>> cpu =
        CreateCpuCommunicators(size, absl::Seconds(60));
    const int64_t count = 1000;  // per-rank slice
    std::vector<std::vector<float>> inputs;
    for (int32_t r = 0; r < size; ++r) inputs.push_back(RandomFloats(size * count, 100 + r));
    struct Results {
      std::vector<float> gather, scatter, reduce, bcast;
    };
    std::vector<Results> want(size), got(size);
    RunRanks(size, [&](int32_t r) {
      Results& w = want[r];
      w.gather.resize(size * count);
      w.scatter.resize(count);
      w.reduce = inputs[r];
      w.bcast = inputs[r];
      EXPECT_TRUE(
          cpu[r]->AllGather(inputs[r].data(), w.gather.data(), count, CommDType::kF32).ok());
      EXPECT_TRUE(
          cpu[r]->ReduceScatter(inputs[r].data(), w.scatter.data(), count, CommDType::kF32).ok());
      EXPECT_TRUE(cpu[r]->AllReduce(w.reduce.data(), size * count, CommDType::kF32).ok());
      EXPECT_TRUE(cpu[r]->Broadcast(w.bcast.data(), size * count * 4, size - 1).ok());
    });
    RunRanks(size, [&](int32_t r) {
      absl::StatusOr<std::unique_ptr<ComputeBackend>> be = CreateCudaBackend(r);
      ASSERT_TRUE(be.ok()) << be.status();
      ComputeBackend& b = **be;
      auto in = Put(b, inputs[r]);
      auto gather = Put(b, std::vector<float>(size * count));
      auto scatter = Put(b, std::vector<float>(count));
      auto reduce = Put(b, inputs[r]);
      auto bcast = Put(b, inputs[r]);
      Communicator& c = *nccl[r];
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.size(), size);
      ASSERT_TRUE(c.AllGather(in->data(), gather->data(), count, CommDType::kF32).ok());
      ASSERT_TRUE(c.ReduceScatter(in->data(), scatter->data(), count, CommDType::kF32).ok());
      ASSERT_TRUE(c.AllReduce(reduce->data(), size * count, CommDType::kF32).ok());
      ASSERT_TRUE(c.Broadcast(bcast->data(), size * count * 4, size - 1).ok());
      ASSERT_TRUE(c.Barrier().ok());
      got[r] = {Get<float>(b, *gather, size * count), Get<float>(b, *scatter, count),
                Get<float>(b, *reduce, size * count), Get<float>(b, *bcast, size * count)};
    });
    for (int32_t r = 0; r < size; ++r) {
      EXPECT_EQ(got[r].gather, want[r].gather) << "rank " << r;
      EXPECT_EQ(got[r].bcast, want[r].bcast) << "rank " << r;
      EXPECT_EQ(got[r].reduce, got[0].reduce) << "all-reduce must be identical on every rank";
      for (int64_t i = 0; i < size * count; ++i) {
        double mag = 0;
        for (int32_t q = 0; q < size; ++q) mag += std::abs(inputs[q][i]);
        ASSERT_NEAR(got[r].reduce[i], want[r].reduce[i], 1e-6 * mag) << "rank " << r << " " << i;
        if (i < count) {
          double smag = 0;
          for (int32_t q = 0; q < size; ++q) smag += std::abs(inputs[q][r * count + i]);
          ASSERT_NEAR(got[r].scatter[i], want[r].scatter[i], 1e-6 * smag) << "rank " << r;
        }
      }
    }
  }
};

TEST_F(NcclCommunicatorTest, SingleRankGroupMatchesCpu) { CompareWithCpu(1); }

TEST_F(NcclCommunicatorTest, MultiRankGroupsMatchCpu) {
  if (!NeedGpus(2)) GTEST_SKIP() << "needs 2 GPUs, found " << testing::CudaDeviceCount();
  for (int32_t size = 2; size <= std::min(testing::CudaDeviceCount(), 4); ++size) {
    SCOPED_TRACE("size " + std::to_string(size));
    CompareWithCpu(size);
    if (HasFatalFailure()) return;
  }
}

TEST_F(NcclCommunicatorTest, HalfPrecisionSumsAndUnsupportedTypes) {
  const int32_t size = std::min(testing::CudaDeviceCount(), 2);
  std::vector<std::unique_ptr<Communicator>> comms = MakeComms(size, absl::Seconds(60));
  ASSERT_EQ(static_cast<int32_t>(comms.size()), size);
  const int64_t n = 513;
  RunRanks(size, [&](int32_t r) {
    absl::StatusOr<std::unique_ptr<ComputeBackend>> be = CreateCudaBackend(r);
    ASSERT_TRUE(be.ok()) << be.status();
    for (KvDType t : {KvDType::kF16, KvDType::kBF16}) {
      // Rank r contributes x_i·(r + 1), with x_i exactly representable in both formats.
      std::vector<uint16_t> data(n);
      for (int64_t i = 0; i < n; ++i) {
        const float x = static_cast<float>((i % 32) - 16) * 0.25f * static_cast<float>(r + 1);
        data[i] = t == KvDType::kF16 ? FloatToHalf(x) : FloatToBf16(x);
      }
      auto buf = Put(**be, data);
      ASSERT_TRUE(
          comms[r]
              ->AllReduce(buf->data(), n, t == KvDType::kF16 ? CommDType::kF16 : CommDType::kBF16)
              .ok());
      const std::vector<uint16_t> out = Get<uint16_t>(**be, *buf, n);
      const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
      for (int64_t i = 0; i < n; ++i) {
        const float want = static_cast<float>((i % 32) - 16) * 0.25f * ranks_sum;
        const float got = t == KvDType::kF16 ? HalfToFloat(out[i]) : Bf16ToFloat(out[i]);
        ASSERT_EQ(got, want) << "element " << i;  // small integers·0.25: exact in both
      }
    }
    auto u8 = Put(**be, std::vector<uint8_t>(8));
    const absl::Status s = comms[r]->AllReduce(u8->data(), 8, CommDType::kU8);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(comms[r]->AllReduce(u8->data(), 0, CommDType::kF32).ok()) << "empty collective";
  });
}

TEST_F(NcclCommunicatorTest, AbortFailsEveryLaterCollective) {
  const int32_t size = std::min(testing::CudaDeviceCount(), 2);
  std::vector<std::unique_ptr<Communicator>> comms = MakeComms(size, absl::Seconds(60));
  ASSERT_EQ(static_cast<int32_t>(comms.size()), size);
  comms[size - 1]->Abort(absl::CancelledError("rank failed: stop"));
  RunRanks(size, [&](int32_t r) {
    absl::StatusOr<std::unique_ptr<ComputeBackend>> be = CreateCudaBackend(r);
    ASSERT_TRUE(be.ok()) << be.status();
    auto buf = Put(**be, std::vector<float>(16, 1.f));
    const absl::Status s = comms[r]->AllReduce(buf->data(), 16, CommDType::kF32);
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
    EXPECT_EQ(s.message(), "rank failed: stop");
    EXPECT_EQ(comms[r]->Barrier().code(), absl::StatusCode::kCancelled);
  });
}

TEST_F(NcclCommunicatorTest, PeerThatNeverArrivesTimesOut) {
  if (!NeedGpus(2)) GTEST_SKIP() << "needs 2 GPUs, found " << testing::CudaDeviceCount();
  std::vector<std::unique_ptr<Communicator>> comms = MakeComms(2, absl::Seconds(2));
  ASSERT_EQ(comms.size(), 2u);
  absl::StatusOr<std::unique_ptr<ComputeBackend>> be = CreateCudaBackend(0);
  ASSERT_TRUE(be.ok()) << be.status();
  auto buf = Put(**be, std::vector<float>(1024, 1.f));
  const absl::Time start = absl::Now();
  const absl::Status s = comms[0]->AllReduce(buf->data(), 1024, CommDType::kF32);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("peers did not complete the collective within 2s"), std::string::npos)
      << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "the wait must be bounded";
  // The group is unusable afterwards, for every member.
  EXPECT_EQ(comms[1]->Barrier().code(), absl::StatusCode::kDeadlineExceeded);
  // The backend's stream is still usable (the aborted collective kernel has ended).
  EXPECT_TRUE((*be)->Synchronize().ok());
}

}  // namespace
}  // namespace tandem
