#include "engine/cpu_communicator.h"

#include <cstdint>
#include <thread>
#include <vector>

#include "attention/kv_dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Runs fn(rank, comm) on one thread per rank and joins them.
void RunRanks(std::vector<std::unique_ptr<Communicator>>& comms,
              const std::function<void(int32_t, Communicator&)>& fn) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] { fn(static_cast<int32_t>(r), *comms[r]); });
  }
  for (auto& t : threads) t.join();
}

TEST(CpuCommunicatorTest, CollectivesHaveTheDocumentedSemantics) {
  for (int32_t n : {1, 2, 3, 9}) {
    auto comms = CreateCpuCommunicators(n, absl::Seconds(30));
    std::vector<std::vector<float>> gathered(n), scattered(n), reduced(n);
    std::vector<std::vector<int64_t>> bcast(n);
    RunRanks(comms, [&](int32_t r, Communicator& c) {
      // AllGather of 2 values per rank.
      const float send[2] = {static_cast<float>(r), static_cast<float>(10 * r)};
      gathered[r].resize(2 * n);
      ASSERT_TRUE(c.AllGather(send, gathered[r].data(), 2, CommDType::kF32).ok());
      // ReduceScatter: rank r contributes value (r + 1) * (j + 1) at index j.
      std::vector<float> rs(3 * n);
      for (int32_t j = 0; j < 3 * n; ++j) rs[j] = static_cast<float>((r + 1) * (j + 1));
      scattered[r].resize(3);
      ASSERT_TRUE(c.ReduceScatter(rs.data(), scattered[r].data(), 3, CommDType::kF32).ok());
      // AllReduce of 7 values (not divisible by n).
      reduced[r].assign(7, 0.f);
      for (int j = 0; j < 7; ++j) reduced[r][j] = static_cast<float>(r * 100 + j);
      ASSERT_TRUE(c.AllReduce(reduced[r].data(), 7, CommDType::kF32).ok());
      bcast[r] = {r == n - 1 ? int64_t{42} : int64_t{-1}, r == n - 1 ? int64_t{7} : int64_t{-1}};
      ASSERT_TRUE(c.Broadcast(bcast[r].data(), 2 * sizeof(int64_t), n - 1).ok());
      ASSERT_TRUE(c.Barrier().ok());
    });
    const float sum_r1 = static_cast<float>(n * (n + 1) / 2);  // Σ (r + 1)
    for (int32_t r = 0; r < n; ++r) {
      for (int32_t k = 0; k < n; ++k) {
        EXPECT_EQ(gathered[r][2 * k], k);
        EXPECT_EQ(gathered[r][2 * k + 1], 10 * k);
      }
      for (int32_t j = 0; j < 3; ++j) EXPECT_EQ(scattered[r][j], sum_r1 * (3 * r + j + 1));
      for (int j = 0; j < 7; ++j) {
        EXPECT_EQ(reduced[r][j], static_cast<float>(100 * n * (n - 1) / 2 + n * j));
      }
      EXPECT_THAT(bcast[r], ElementsAre(42, 7));
    }
  }
}

TEST(CpuCommunicatorTest, AllReduceIsBitIdenticalAcrossRanks) {
  auto comms = CreateCpuCommunicators(5, absl::Seconds(30));
  std::vector<std::vector<float>> data(5, std::vector<float>(1000));
  RunRanks(comms, [&](int32_t r, Communicator& c) {
    for (int j = 0; j < 1000; ++j) data[r][j] = 1.f / (1 + r * 7 + j) + 1e-7f * r;
    ASSERT_TRUE(c.AllReduce(data[r].data(), 1000, CommDType::kF32).ok());
  });
  for (int32_t r = 1; r < 5; ++r) EXPECT_EQ(data[r], data[0]);
}

TEST(CpuCommunicatorTest, AbortWakesWaitingPeers) {
  auto comms = CreateCpuCommunicators(3, absl::Minutes(5));
  std::vector<absl::Status> results(3);
  RunRanks(comms, [&](int32_t r, Communicator& c) {
    if (r == 2) {
      c.Abort(absl::InternalError("rank 2 failed"));
      results[r] = absl::OkStatus();
      return;
    }
    results[r] = c.Barrier();
  });
  EXPECT_EQ(results[0].code(), absl::StatusCode::kInternal);
  EXPECT_THAT(results[1].message(), HasSubstr("rank 2 failed"));
}

TEST(CpuCommunicatorTest, MissingPeerTimesOut) {
  auto comms = CreateCpuCommunicators(2, absl::Milliseconds(100));
  const absl::Status s = comms[0]->Barrier();  // rank 1 never arrives
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("1 of 2 ranks waiting"));
  // The group stays failed.
  EXPECT_EQ(comms[1]->Barrier().code(), absl::StatusCode::kDeadlineExceeded);
}

// bf16 / f16 sums (the engine's bf16 activations): each element widened to f32, added in rank
// order, rounded to the dtype after every addition — like NCCL's partial sums, which are rounded
// as they travel. 1 + u/2 + u/2 (u the unit in the last place at 1) shows the difference: each
// addition is a tie that rounds to even (1), where a sum rounded once would give 1 + u.
TEST(CpuCommunicatorTest, HalfPrecisionSumsRoundAfterEveryAddition) {
  struct Case {
    CommDType dtype;
    uint16_t (*to)(float);
    float (*from)(uint16_t);
    float ulp_at_one;
  };
  for (const Case& k : {Case{CommDType::kBF16, FloatToBf16, Bf16ToFloat, 0x1p-7f},
                        Case{CommDType::kF16, FloatToHalf, HalfToFloat, 0x1p-10f}}) {
    auto comms = CreateCpuCommunicators(3, absl::Seconds(30));
    // Element 0: the ties; elements 1..6: values each rank's rounding makes distinct.
    const int64_t count = 7;
    std::vector<std::vector<uint16_t>> reduced(3), scattered(3);
    std::vector<std::vector<float>> inputs(3, std::vector<float>(count));
    for (int32_t r = 0; r < 3; ++r) {
      inputs[r][0] = r == 0 ? 1.f : k.ulp_at_one / 2;
      for (int64_t j = 1; j < count; ++j) inputs[r][j] = k.from(k.to(0.3f * (r + 1) - 0.17f * j));
    }
    RunRanks(comms, [&](int32_t r, Communicator& c) {
      reduced[r].resize(count);
      for (int64_t j = 0; j < count; ++j) reduced[r][j] = k.to(inputs[r][j]);
      ASSERT_TRUE(c.AllReduce(reduced[r].data(), count, k.dtype).ok());
      // ReduceScatter of 3 · 2 elements: rank r's input element j is inputs[r][j + 1].
      std::vector<uint16_t> send(6);
      for (int64_t j = 0; j < 6; ++j) send[j] = k.to(inputs[r][j + 1]);
      scattered[r].resize(2);
      ASSERT_TRUE(c.ReduceScatter(send.data(), scattered[r].data(), 2, k.dtype).ok());
    });
    for (int32_t r = 0; r < 3; ++r) {
      EXPECT_EQ(reduced[r], reduced[0]) << "every rank holds the same bits";
      EXPECT_EQ(k.from(reduced[r][0]), 1.f) << "rounded after each addition, not once";
      for (int64_t j = 1; j < count; ++j) {
        const float want = k.from(k.to(k.from(k.to(inputs[0][j] + inputs[1][j])) + inputs[2][j]));
        EXPECT_EQ(k.from(reduced[r][j]), want) << "element " << j;
      }
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t e = 2 * r + j + 1;
        const float want = k.from(k.to(k.from(k.to(inputs[0][e] + inputs[1][e])) + inputs[2][e]));
        EXPECT_EQ(k.from(scattered[r][j]), want) << "rank " << r << " element " << j;
      }
    }
  }
}

TEST(CpuCommunicatorTest, ReductionsRejectNonFloat) {
  auto comms = CreateCpuCommunicators(1, absl::Seconds(1));
  int32_t v = 1;
  EXPECT_EQ(comms[0]->AllReduce(&v, 1, CommDType::kI32).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem
