#include "kv_transfer/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tandem {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;

// table[k][b]: CRC of byte b followed by k zero bytes (slicing-by-8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) != 0 ? kPoly : 0u);
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
  }
  return t;
}

const Tables& TablesOnce() {
  static const Tables tables = MakeTables();
  return tables;
}

// Raw (no inversion) table CRC.
uint32_t RawPortable(uint32_t c, const unsigned char* p, size_t n) {
  const Tables& t = TablesOnce();
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= c;
    c = t[7][v & 0xFF] ^ t[6][(v >> 8) & 0xFF] ^ t[5][(v >> 16) & 0xFF] ^ t[4][(v >> 24) & 0xFF] ^
        t[3][(v >> 32) & 0xFF] ^ t[2][(v >> 40) & 0xFF] ^ t[1][(v >> 48) & 0xFF] ^ t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return c;
}

// GF(2) helpers to shift a raw CRC over `len` zero bytes: combining three streams needs
// crc(A‖B) from crc(A), crc(B) (zlib's crc32_combine, for the Castagnoli polynomial).
uint32_t Gf2Times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (int i = 0; vec != 0; ++i, vec >>= 1) {
    if ((vec & 1u) != 0) sum ^= mat[i];
  }
  return sum;
}

// The 32x32 GF(2) matrix (column i = image of bit i) that advances a raw CRC over `2^log2_len`
// zero bytes: the one-zero-byte step squared log2_len times.
struct ShiftMatrix {
  uint32_t m[32];
};

ShiftMatrix MakeShift(int log2_len) {
  const Tables& t = TablesOnce();
  ShiftMatrix out{};
  for (int i = 0; i < 32; ++i) {
    const uint32_t c = 1u << i;
    out.m[i] = (c >> 8) ^ t[0][c & 0xFF];  // one zero byte
  }
  for (int k = 0; k < log2_len; ++k) {
    ShiftMatrix sq{};
    for (int i = 0; i < 32; ++i) sq.m[i] = Gf2Times(out.m, out.m[i]);
    out = sq;
  }
  return out;
}

// ZeroShift(k): the matrix advancing a raw CRC over 2^k zero bytes, as byte tables.
struct ZeroShifts {
  static constexpr int kPowers = 64;
  uint32_t t[kPowers][4][256];
};

const ZeroShifts& ZeroShiftsOnce() {
  static const ZeroShifts* shifts = [] {
    auto* z = new ZeroShifts;
    ShiftMatrix m = MakeShift(0);
    for (int k = 0; k < ZeroShifts::kPowers; ++k) {
      for (int j = 0; j < 4; ++j) {
        for (uint32_t b = 0; b < 256; ++b) z->t[k][j][b] = Gf2Times(m.m, b << (8 * j));
      }
      ShiftMatrix sq{};
      for (int i = 0; i < 32; ++i) sq.m[i] = Gf2Times(m.m, m.m[i]);
      m = sq;
    }
    return z;
  }();
  return *shifts;
}

#if defined(__x86_64__)
// Bytes per stream per round of the three-stream loop; the shift matrix is built once for it.
constexpr int kLog2Stripe = 13;
constexpr size_t kStripe = size_t{1} << kLog2Stripe;  // 8 KiB

// The stripe shift as byte tables: shift(v) = t[0][v & 0xFF] ^ ... ^ t[3][v >> 24], four loads
// instead of a branchy bit loop (which cost ~20 % of the three-stream loop).
struct ShiftTables {
  uint32_t t[4][256];
};

ShiftTables MakeShiftTables() {
  const ShiftMatrix m = MakeShift(kLog2Stripe);
  ShiftTables out{};
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) out.t[k][b] = Gf2Times(m.m, b << (8 * k));
  }
  return out;
}

const ShiftTables& StripeShift() {
  static const ShiftTables shift = MakeShiftTables();
  return shift;
}

inline uint32_t Shift(const ShiftTables& s, uint32_t v) {
  return s.t[0][v & 0xFF] ^ s.t[1][(v >> 8) & 0xFF] ^ s.t[2][(v >> 16) & 0xFF] ^ s.t[3][v >> 24];
}

__attribute__((target("sse4.2"))) uint32_t RawOneStream(uint32_t c, const unsigned char* p,
                                                        size_t n) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n-- > 0) c = _mm_crc32_u8(c, *p++);
  return c;
}

__attribute__((target("sse4.2"))) uint32_t RawHardware(uint32_t c, const unsigned char* p,
                                                       size_t n) {
  const ShiftTables& shift = StripeShift();
  while (n >= 3 * kStripe) {
    uint64_t a = c, b = 0, d = 0;
    const unsigned char* pa = p;
    const unsigned char* pb = p + kStripe;
    const unsigned char* pd = p + 2 * kStripe;
    for (size_t i = 0; i < kStripe; i += 8) {
      uint64_t va, vb, vd;
      std::memcpy(&va, pa + i, 8);
      std::memcpy(&vb, pb + i, 8);
      std::memcpy(&vd, pd + i, 8);
      a = _mm_crc32_u64(a, va);
      b = _mm_crc32_u64(b, vb);
      d = _mm_crc32_u64(d, vd);
    }
    // Raw CRCs are linear: crc(A‖B) = shift(crc(A), |B|) ^ crc(B) when B's stream starts at 0.
    uint32_t r = Shift(shift, static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    r = Shift(shift, r) ^ static_cast<uint32_t>(d);
    c = r;
    p += 3 * kStripe;
    n -= 3 * kStripe;
  }
  return RawOneStream(c, p, n);
}

bool HaveSse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n) {
  return ~RawPortable(~crc, static_cast<const unsigned char*>(data), n);
}

uint32_t Crc32c(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (HaveSse42()) return ~RawHardware(~crc, static_cast<const unsigned char*>(data), n);
#endif
  return Crc32cPortable(crc, data, n);
}

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  const ZeroShifts& z = ZeroShiftsOnce();
  uint32_t v = crc_a;
  for (int k = 0; len_b != 0 && v != 0; ++k, len_b >>= 1) {
    if ((len_b & 1u) == 0) continue;
    const auto& t = z.t[k];
    v = t[0][v & 0xFF] ^ t[1][(v >> 8) & 0xFF] ^ t[2][(v >> 16) & 0xFF] ^ t[3][v >> 24];
  }
  return v ^ crc_b;
}

bool Crc32cIsHardware() {
#if defined(__x86_64__)
  return HaveSse42();
#else
  return false;
#endif
}

}  // namespace tandem
