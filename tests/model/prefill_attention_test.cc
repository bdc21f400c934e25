// The CPU backend's GEMM path for long prefill chunks must equal the dot-product kernel (both
// DCP-aware, causal on global positions), for every KV dtype, DCP placement and mixed batches.
#include "model/cpu/prefill_attention.h"

#include <cmath>
#include <random>
#include <vector>

#include "attention/cpu/paged_attention.h"
#include "gtest/gtest.h"
#include "model/cpu/cpu_backend.h"

namespace tandem {
namespace {

struct Case {
  int32_t dcp, rank, interleave;
  KvDType dtype;
};

TEST(PrefillAttentionTest, GemmPathMatchesTheKernel) {
  const int32_t block = 8, heads = 2, group = 3, d = 32, layers = 2, layer = 1;
  for (const Case& c : {Case{1, 0, 1, KvDType::kF32}, Case{2, 1, 1, KvDType::kF32},
                        Case{3, 2, 4, KvDType::kF16}, Case{2, 0, 8, KvDType::kBF16}}) {
    const PoolGeometry g{heads, layers, block, d, c.dtype};
    const int64_t num_blocks = 40;
    std::vector<char> pool_mem(PoolBytes(g, num_blocks));
    std::mt19937 rng(c.dcp * 10 + c.rank);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    const KvPoolView pool{pool_mem.data(), num_blocks, g};
    // Fill every slot with random K/V through the write kernel (converts to the dtype).
    std::vector<int64_t> slots(num_blocks * block);
    for (int64_t s = 0; s < num_blocks * block; ++s) slots[s] = s;
    std::vector<float> kv(slots.size() * heads * d);
    for (float& x : kv) x = dist(rng);
    for (int32_t l = 0; l < layers; ++l) {
      WriteKvCache(pool, l, slots.data(), static_cast<int64_t>(slots.size()), kv.data(), kv.data());
    }
    // Three requests: a 70-row prefill chunk starting at 10, a 20-row chunk, and a 3-row one
    // (below the GEMM threshold), plus a padding row, interleaved in the batch.
    const std::vector<int32_t> ids = {3, 1, 4, 0, 5, 9, 2, 6, 7, 8, 10, 11, 12, 13, 14, 15,
                                      16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29};
    const std::vector<int64_t> offsets = {0, 10, 20, 30};
    const BlockTablesView tables{ids.data(), offsets.data(), 3};
    std::vector<int32_t> request;
    std::vector<int64_t> position;
    for (int i = 0; i < 70; ++i) request.push_back(0), position.push_back(10 + i);
    position.push_back(-1), request.push_back(0);
    for (int i = 0; i < 20; ++i) request.push_back(1), position.push_back(31 + i);
    for (int i = 0; i < 3; ++i) request.push_back(2), position.push_back(5 + i);
    AttentionRows rows;
    rows.num_rows = static_cast<int64_t>(position.size());
    rows.request = request.data();
    rows.position = position.data();
    rows.tables = tables;
    rows.dcp = DcpGeometry{block, c.dcp, c.interleave};
    rows.dcp_rank = c.rank;
    const int32_t nq = heads * group;
    ASSERT_TRUE(ValidateAttentionCall(pool, layer, rows, nq).ok());
    std::vector<float> q(rows.num_rows * nq * d);
    for (float& x : q) x = dist(rng);
    std::vector<float> want(q.size()), got(q.size()), want_lse(rows.num_rows * nq),
        got_lse(rows.num_rows * nq);
    const float scale = 1.f / std::sqrt(static_cast<float>(d));
    PagedAttention(pool, layer, rows, q.data(), nq, scale, want.data(), want_lse.data());
    ASSERT_EQ(cpu::GemmAttentionGroups(rows).size(), 2u);
    auto backend = CreateCpuBackend();
    ASSERT_TRUE(backend->Attention(pool, layer, rows, q.data(), nq, scale, got.data(), got_lse.data()).ok());
    for (size_t i = 0; i < want_lse.size(); ++i) {
      if (std::isinf(want_lse[i])) {
        EXPECT_EQ(got_lse[i], want_lse[i]) << i;
      } else {
        EXPECT_NEAR(got_lse[i], want_lse[i], 1e-5 * (1 + std::abs(want_lse[i]))) << i;
      }
    }
    double max_err = 0;
    for (size_t i = 0; i < want.size(); ++i) max_err = std::max(max_err, std::abs(double{got[i]} - want[i]));
    EXPECT_LT(max_err, 1e-5) << "dcp " << c.dcp << " rank " << c.rank << " I " << c.interleave;
  }
}

}  // namespace
}  // namespace tandem
