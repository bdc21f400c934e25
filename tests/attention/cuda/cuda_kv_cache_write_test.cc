// LaunchWriteKvCache is byte-identical to the CPU WriteKvCache, including the conversions at
// their edges: round-to-nearest-even ties, f16 subnormals and overflow to infinity, bf16
// rounding carries, signed zeros and infinities; slot −1 rows leave the pool untouched.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "attention/cpu/paged_attention.h"
#include "attention/cuda/cuda_attention.h"
#include "attention/kv_dtype.h"
#include "gtest/gtest.h"
#include "tests/attention/cuda/cuda_test_util.h"

namespace tandem {
namespace {

using testing::CudaTest;
using testing::DeviceArray;
using testing::DeviceBytes;

// Values at the interesting points of the f16 and bf16 conversions, then random ones.
std::vector<float> EdgeValues(size_t n, uint64_t seed) {
  std::vector<float> v = {0.f,
                          -0.f,
                          INFINITY,
                          -INFINITY,
                          65504.f,         // f16 max
                          65519.f,         // rounds to f16 max
                          65520.f,         // rounds to f16 inf
                          1e-8f,           // f16 subnormal range
                          5.9604645e-8f,   // f16 min subnormal
                          2.9802322e-8f,   // half of it: tie to zero
                          1.0009765625f,   // 1 + 2^-10: exact in f16
                          1.00048828125f,  // 1 + 2^-11: f16 tie to even
                          1.00390625f,     // 1 + 2^-8: bf16 tie to even
                          1.01171875f,     // 1 + 3·2^-8: bf16 tie, rounds up
                          3.3895314e38f,   // bf16 rounding carries into the exponent
                          -123.456f};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 10.f);
  while (v.size() < n) v.push_back(normal(rng));
  v.resize(n);
  return v;
}

class CudaKvCacheWriteTest : public CudaTest {};

TEST_F(CudaKvCacheWriteTest, BytesEqualCpuWrite) {
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    for (int32_t head_dim : {1, 16, 64, 130}) {
      SCOPED_TRACE(std::string(KvDTypeName(dtype)) + " head_dim=" + std::to_string(head_dim));
      const PoolGeometry g{3, 2, 8, head_dim, dtype};
      const int64_t blocks = 5;
      const int64_t rows = 23;
      // Distinct slots in shuffled order, a few −1 (owned by another DCP rank).
      std::vector<int64_t> slots(blocks * g.block_size);
      for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int64_t>(i);
      std::shuffle(slots.begin(), slots.end(), std::mt19937_64(head_dim));
      slots.resize(rows);
      for (int64_t i = 0; i < rows; i += 5) slots[i] = -1;
      const int64_t row_floats = int64_t{g.num_kv_heads} * head_dim;
      const std::vector<float> k = EdgeValues(rows * row_floats, 1);
      const std::vector<float> v = EdgeValues(rows * row_floats, 2);

      const int64_t bytes = PoolBytes(g, blocks);
      std::vector<uint8_t> cpu(bytes, 0xa5);
      const KvPoolView cpu_view{cpu.data(), blocks, g};
      ASSERT_TRUE(ValidateKvCacheWrite(cpu_view, 1, slots.data(), rows).ok());
      WriteKvCache(cpu_view, 1, slots.data(), rows, k.data(), v.data());

      DeviceBytes pool(bytes);
      pool.Fill(0xa5);
      DeviceArray<int64_t> dslots(slots);
      DeviceArray<float> dk(k), dv(v);
      ASSERT_TRUE(gpu::LaunchWriteKvCache(KvPoolView{pool.data(), blocks, g}, 1, dslots.get(), rows,
                                          dk.get(), dv.get(), nullptr)
                      .ok());
      testing::SyncDevice();
      std::vector<uint8_t> gpu(bytes);
      pool.Download(gpu.data(), bytes);
      for (int64_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(gpu[i], cpu[i]) << "byte " << i << " of the pool";
      }
    }
  }
}

// LaunchWriteKvCacheBf16 (the CUDA backend's bf16 activations): bf16 K/V rows leave exactly the
// bytes the CPU write leaves for their f32 widening, into every pool dtype.
TEST_F(CudaKvCacheWriteTest, Bf16RowsEqualCpuWriteOfTheirWidening) {
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    SCOPED_TRACE(KvDTypeName(dtype));
    const PoolGeometry g{2, 2, 8, 64, dtype};
    const int64_t blocks = 4, rows = 19;
    std::vector<int64_t> slots(rows);
    for (int64_t i = 0; i < rows; ++i) slots[i] = (i * 7) % (blocks * g.block_size);
    slots[3] = -1;
    const int64_t n = rows * g.num_kv_heads * g.head_dim;
    const std::vector<float> raw_k = EdgeValues(n, 3), raw_v = EdgeValues(n, 4);
    std::vector<uint16_t> k16(n), v16(n);
    std::vector<float> k(n), v(n);
    for (int64_t i = 0; i < n; ++i) {
      k[i] = Bf16ToFloat(k16[i] = FloatToBf16(raw_k[i]));
      v[i] = Bf16ToFloat(v16[i] = FloatToBf16(raw_v[i]));
    }
    const int64_t bytes = PoolBytes(g, blocks);
    std::vector<uint8_t> cpu(bytes, 0x5a);
    const KvPoolView cpu_view{cpu.data(), blocks, g};
    WriteKvCache(cpu_view, 0, slots.data(), rows, k.data(), v.data());
    DeviceBytes pool(bytes);
    pool.Fill(0x5a);
    DeviceArray<int64_t> dslots(slots);
    DeviceArray<uint16_t> dk(k16), dv(v16);
    ASSERT_TRUE(gpu::LaunchWriteKvCacheBf16(KvPoolView{pool.data(), blocks, g}, 0, dslots.get(),
                                            rows, dk.get(), dv.get(), nullptr)
                    .ok());
    testing::SyncDevice();
    std::vector<uint8_t> gpu(bytes);
    pool.Download(gpu.data(), bytes);
    ASSERT_EQ(gpu, cpu);
  }
}

TEST_F(CudaKvCacheWriteTest, RejectsBadLayer) {
  const PoolGeometry g{1, 2, 8, 16, KvDType::kF32};
  const absl::Status s =
      gpu::LaunchWriteKvCache(KvPoolView{nullptr, 1, g}, 2, nullptr, 1, nullptr, nullptr, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer=2 of 2"), std::string::npos) << s;
}

}  // namespace
}  // namespace tandem
