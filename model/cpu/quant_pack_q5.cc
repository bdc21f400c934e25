#include "model/cpu/quant_pack_q5.h"

#include <cstring>

#include "model/format/half.h"

namespace tandem::quant {
namespace {

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float LoadF16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return F16ToF32(h);
}

}  // namespace

void PackQ5Row(GgmlType type, const uint8_t* src, int64_t k, uint8_t* dst) {
  const int64_t blocks = k / 32;
  const int scales = Q5Scales(type);
  const int64_t block_bytes = type == GgmlType::kQ5_1 ? 24 : 22;
  const int64_t groups = Q5Groups(blocks);
  std::memset(dst, 0, static_cast<size_t>(groups * kQ5GroupBytes));
  float* sc = reinterpret_cast<float*>(dst + groups * kQ5GroupBytes);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = src + b * block_bytes;
    const uint32_t qh = LoadU32(blk + 2 * scales);
    const uint8_t* qs = blk + 2 * scales + 4;
    uint8_t* group = dst + b / kQ5GroupBlocks * kQ5GroupBytes;
    const int f0 = static_cast<int>(2 * (b % kQ5GroupBlocks));
    for (int j = 0; j < 16; ++j) {
      const uint32_t lo = (qs[j] & 0x0fu) | (((qh >> j) & 1u) << 4);
      const uint32_t hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
      uint32_t lane = LoadU32(group + 4 * j);
      lane |= lo << (5 * f0) | hi << (5 * (f0 + 1));
      std::memcpy(group + 4 * j, &lane, sizeof lane);
    }
    for (int s = 0; s < scales; ++s) sc[b * scales + s] = LoadF16(blk + 2 * s);
  }
}

void UnpackQ5Row(GgmlType type, const uint8_t* row, int64_t k, float* out) {
  const int64_t blocks = k / 32;
  const int scales = Q5Scales(type);
  const float* sc = reinterpret_cast<const float*>(row + Q5Groups(blocks) * kQ5GroupBytes);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* group = row + b / kQ5GroupBlocks * kQ5GroupBytes;
    const int f0 = static_cast<int>(2 * (b % kQ5GroupBlocks));
    const float d = sc[b * scales];
    for (int e = 0; e < 32; ++e) {
      const int f = f0 + e / 16;
      const uint32_t q = (LoadU32(group + 4 * (e % 16)) >> (5 * f)) & 31u;
      // dequant.cc: d·(q − 16) with the integer difference (Q5_0), d·q + m (Q5_1).
      out[32 * b + e] = type == GgmlType::kQ5_1 ? d * static_cast<float>(q) + sc[b * scales + 1]
                                                : d * static_cast<float>(static_cast<int>(q) - 16);
    }
  }
}

}  // namespace tandem::quant
