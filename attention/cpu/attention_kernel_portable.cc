// Portable attention kernels: one float per "vector", any head_dim, any x86-64 (or other) CPU.
// Also the reference semantics of the vector paths' conversions (kv_dtype.h).
#include <math.h>

#include "attention/cpu/attention_kernel.h"
#include "attention/cpu/attention_tile_query_lanes.h"
#include "attention/kv_dtype.h"

namespace tandem::attention_cpu {
namespace {

struct PortableTraits {
  using V = float;
  static constexpr int kLanes = 1;
  static constexpr int kQueryBlock = 4;
  static constexpr int kTokenBlock = 2;
  static constexpr int kValueChunks = 1;

  static V Zero() { return 0.f; }
  static V Set1(float x) { return x; }
  static V Load(const float* p) { return *p; }
  static void Store(float* p, V v) { *p = v; }
  static V Add(V a, V b) { return a + b; }
  static V Sub(V a, V b) { return a - b; }
  static V Mul(V a, V b) { return a * b; }
  static V Max(V a, V b) { return a > b ? a : b; }
  static V Fma(V a, V b, V c) { return a * b + c; }
  static float ReduceAdd(V v) { return v; }
  static float ReduceMax(V v) { return v; }

  static void StoreSums(const V (&acc)[4][2], float* p) {
    for (int q = 0; q < 4; ++q) {
      for (int t = 0; t < 2; ++t) p[q * kPieceTokens + t] = acc[q][t];
    }
  }
  static V Exp(V x) { return expf(x); }
  static V MaskTail(V x, int32_t valid) { return valid > 0 ? x : -INFINITY; }

  static V LoadKv(const float* p, KvF32) { return *p; }
  static V LoadKv(const uint16_t* p, KvF16) { return HalfToFloat(*p); }
  static V LoadKv(const uint16_t* p, KvBF16) { return Bf16ToFloat(*p); }
  static void StoreKv(uint16_t* p, V v, KvF16) { *p = FloatToHalf(v); }
  static void StoreKv(uint16_t* p, V v, KvBF16) { *p = FloatToBf16(v); }
};

void AttendTile(const TileArgs& args) { AttendTileImpl<PortableTraits>(args); }
void StoreRow(const float* src, void* dst, int64_t n, KvDType dtype) {
  StoreRowImpl<PortableTraits>(src, dst, n, dtype);
}

constexpr KernelTable kTable{CpuIsa::kPortable, PortableTraits::kLanes, &AttendTile, &StoreRow};

}  // namespace

const KernelTable& PortableKernels() { return kTable; }

}  // namespace tandem::attention_cpu
