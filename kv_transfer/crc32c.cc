#include "kv_transfer/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
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

// Folding with VPCLMULQDQ (AVX-512): four 512-bit accumulators (16 lanes of 128 bits) fold the
// message forward 256 bytes a round; the last 64 bytes of folded state and the tail then go through
// the crc32 instruction. Folding keeps the message's polynomial congruent mod P, and a CRC started
// at 0 depends only on that, so the result is the plain CRC (the incoming crc is XORed into the
// first 4 bytes, as a reflected CRC does). ~40 GB/s cache-resident on the build VM against 7 for
// one crc32 stream and 11-17 for three; from memory it is bound by bandwidth (~19 GB/s).
bool HaveVpclmul() {
  static const bool have = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("vpclmulqdq");
  return have;
}

// x^e mod P (normal form, P = 0x11EDC6F41), bit-reflected and shifted left once: the 33-bit
// constant a reflected carry-less multiply folds with.
uint64_t FoldConstant(int e) {
  uint64_t r = 1;
  for (int i = 0; i < e; ++i) {
    r <<= 1;
    if ((r & 0x100000000ull) != 0) r ^= 0x11EDC6F41ull;
  }
  uint32_t rev = 0;
  for (int i = 0; i < 32; ++i) {
    if ((r & (uint64_t{1} << i)) != 0) rev |= 1u << (31 - i);
  }
  return uint64_t{rev} << 1;
}

// Folding a 128-bit lane forward by `bits`: its low qword (the earlier bytes, higher degrees)
// times x^(bits+32), its high qword times x^(bits-32), in that representation.
struct FoldKeys {
  uint64_t lo, hi;
};
FoldKeys MakeFoldKeys(int bits) { return {FoldConstant(bits + 32), FoldConstant(bits - 32)}; }

__attribute__((target("avx512f,vpclmulqdq"))) inline __m512i Fold512(__m512i acc, __m512i keys,
                                                                     __m512i data) {
  const __m512i lo = _mm512_clmulepi64_epi128(acc, keys, 0x00);
  const __m512i hi = _mm512_clmulepi64_epi128(acc, keys, 0x11);
  return _mm512_ternarylogic_epi64(lo, hi, data, 0x96);  // lo ^ hi ^ data
}

__attribute__((target("avx512f,vpclmulqdq,sse4.2"))) uint32_t RawVpclmul(uint32_t c,
                                                                         const unsigned char* p,
                                                                         size_t n) {
  static const FoldKeys k2048 = MakeFoldKeys(2048), k512 = MakeFoldKeys(512);
  const __m512i by_round =
      _mm512_set_epi64(static_cast<int64_t>(k2048.hi), static_cast<int64_t>(k2048.lo),
                       static_cast<int64_t>(k2048.hi), static_cast<int64_t>(k2048.lo),
                       static_cast<int64_t>(k2048.hi), static_cast<int64_t>(k2048.lo),
                       static_cast<int64_t>(k2048.hi), static_cast<int64_t>(k2048.lo));
  const __m512i by_64 = _mm512_set_epi64(
      static_cast<int64_t>(k512.hi), static_cast<int64_t>(k512.lo), static_cast<int64_t>(k512.hi),
      static_cast<int64_t>(k512.lo), static_cast<int64_t>(k512.hi), static_cast<int64_t>(k512.lo),
      static_cast<int64_t>(k512.hi), static_cast<int64_t>(k512.lo));
  __m512i x0 = _mm512_loadu_si512(p);
  __m512i x1 = _mm512_loadu_si512(p + 64);
  __m512i x2 = _mm512_loadu_si512(p + 128);
  __m512i x3 = _mm512_loadu_si512(p + 192);
  x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(c))));
  p += 256;
  n -= 256;
  while (n >= 256) {
    x0 = Fold512(x0, by_round, _mm512_loadu_si512(p));
    x1 = Fold512(x1, by_round, _mm512_loadu_si512(p + 64));
    x2 = Fold512(x2, by_round, _mm512_loadu_si512(p + 128));
    x3 = Fold512(x3, by_round, _mm512_loadu_si512(p + 192));
    p += 256;
    n -= 256;
  }
  x1 = Fold512(x0, by_64, x1);
  x2 = Fold512(x1, by_64, x2);
  x3 = Fold512(x2, by_64, x3);
  alignas(64) unsigned char folded[64];
  _mm512_store_si512(folded, x3);
  return RawOneStream(RawOneStream(0, folded, sizeof folded), p, n);
}

// 64 bytes to d: a plain store, or a non-temporal one (REQUIRES: d 64-byte aligned) that writes
// the line without reading it into the cache first.
template <bool kStream>
__attribute__((target("avx512f"))) inline void Store64(unsigned char* d, __m512i v) {
  if constexpr (kStream) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d), v);
  } else {
    _mm512_storeu_si512(d, v);
  }
}

// RawVpclmul that also stores every 64 bytes it loads to `d` (REQUIRES: n >= 256; with kStream,
// d 64-byte aligned): the copy and the CRC in one pass over the source. kStream stores with
// non-temporal stores and fences them before returning.
template <bool kStream>
__attribute__((target("avx512f,vpclmulqdq,sse4.2"))) uint32_t RawVpclmulCopy(uint32_t c,
                                                                             unsigned char* d,
                                                                             const unsigned char* p,
                                                                             size_t n) {
  static const FoldKeys k2048 = MakeFoldKeys(2048), k512 = MakeFoldKeys(512);
  const __m512i by_round =
      _mm512_set_epi64(static_cast<int64_t>(k2048.hi), static_cast<int64_t>(k2048.lo),
                       static_cast<int64_t>(k2048.hi), static_cast<int64_t>(k2048.lo),
                       static_cast<int64_t>(k2048.hi), static_cast<int64_t>(k2048.lo),
                       static_cast<int64_t>(k2048.hi), static_cast<int64_t>(k2048.lo));
  const __m512i by_64 = _mm512_set_epi64(
      static_cast<int64_t>(k512.hi), static_cast<int64_t>(k512.lo), static_cast<int64_t>(k512.hi),
      static_cast<int64_t>(k512.lo), static_cast<int64_t>(k512.hi), static_cast<int64_t>(k512.lo),
      static_cast<int64_t>(k512.hi), static_cast<int64_t>(k512.lo));
  __m512i x0 = _mm512_loadu_si512(p);
  __m512i x1 = _mm512_loadu_si512(p + 64);
  __m512i x2 = _mm512_loadu_si512(p + 128);
  __m512i x3 = _mm512_loadu_si512(p + 192);
  Store64<kStream>(d, x0);
  Store64<kStream>(d + 64, x1);
  Store64<kStream>(d + 128, x2);
  Store64<kStream>(d + 192, x3);
  x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(c))));
  p += 256;
  d += 256;
  n -= 256;
  while (n >= 256) {
    const __m512i y0 = _mm512_loadu_si512(p);
    const __m512i y1 = _mm512_loadu_si512(p + 64);
    const __m512i y2 = _mm512_loadu_si512(p + 128);
    const __m512i y3 = _mm512_loadu_si512(p + 192);
    Store64<kStream>(d, y0);
    Store64<kStream>(d + 64, y1);
    Store64<kStream>(d + 128, y2);
    Store64<kStream>(d + 192, y3);
    x0 = Fold512(x0, by_round, y0);
    x1 = Fold512(x1, by_round, y1);
    x2 = Fold512(x2, by_round, y2);
    x3 = Fold512(x3, by_round, y3);
    p += 256;
    d += 256;
    n -= 256;
  }
  if constexpr (kStream) _mm_sfence();
  x1 = Fold512(x0, by_64, x1);
  x2 = Fold512(x1, by_64, x2);
  x3 = Fold512(x2, by_64, x3);
  alignas(64) unsigned char folded[64];
  _mm512_store_si512(folded, x3);
  std::memcpy(d, p, n);
  return RawOneStream(RawOneStream(0, folded, sizeof folded), p, n);
}
#endif

}  // namespace

uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n) {
  return ~RawPortable(~crc, static_cast<const unsigned char*>(data), n);
}

uint32_t Crc32cSse42(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (HaveSse42()) return ~RawHardware(~crc, static_cast<const unsigned char*>(data), n);
#endif
  return Crc32cPortable(crc, data, n);
}

uint32_t Crc32c(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (n >= 256 && HaveVpclmul()) {
    return ~RawVpclmul(~crc, static_cast<const unsigned char*>(data), n);
  }
#endif
  return Crc32cSse42(crc, data, n);
}

uint32_t Crc32cCopy(uint32_t crc, void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* p = static_cast<const unsigned char*>(src);
#if defined(__x86_64__)
  if (n >= 256 && HaveVpclmul()) return ~RawVpclmulCopy<false>(~crc, d, p, n);
#endif
  // Steps that stay in L1 between the copy and the CRC.
  constexpr size_t kStep = size_t{16} << 10;
  while (n > 0) {
    const size_t step = n < kStep ? n : kStep;
    std::memcpy(d, p, step);
    crc = Crc32c(crc, d, step);
    d += step;
    p += step;
    n -= step;
  }
  return crc;
}

uint32_t Crc32cStreamCopy(uint32_t crc, void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  auto* d = static_cast<unsigned char*>(dst);
  const auto* p = static_cast<const unsigned char*>(src);
  // Up to the first 64-byte boundary of dst with plain stores (the streaming loop needs aligned
  // stores), the rest streamed.
  const size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
  if (n >= head + 256 && HaveVpclmul()) {
    crc = Crc32cCopy(crc, d, p, head);
    return ~RawVpclmulCopy<true>(~crc, d + head, p + head, n - head);
  }
#endif
  return Crc32cCopy(crc, dst, src, n);
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

const char* Crc32cImplementation() {
#if defined(__x86_64__)
  if (HaveVpclmul()) return "vpclmulqdq";
  if (HaveSse42()) return "sse4.2";
#endif
  return "table";
}

}  // namespace tandem
