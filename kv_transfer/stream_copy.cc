#include "kv_transfer/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tandem {
namespace {

#if defined(__x86_64__)
// The predicate of crc32c.cc's folding path: both copies stream on the same CPUs.
bool HaveStreaming() {
  static const bool have = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("avx512f") &&
                           __builtin_cpu_supports("vpclmulqdq");
  return have;
}

// REQUIRES: d 64-byte aligned. Copies whole 256-byte rounds; returns the bytes copied.
__attribute__((target("avx512f"))) size_t StreamRounds(unsigned char* d, const unsigned char* p,
                                                       size_t n) {
  size_t done = 0;
  for (; n - done >= 256; done += 256) {
    const __m512i y0 = _mm512_loadu_si512(p + done);
    const __m512i y1 = _mm512_loadu_si512(p + done + 64);
    const __m512i y2 = _mm512_loadu_si512(p + done + 128);
    const __m512i y3 = _mm512_loadu_si512(p + done + 192);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + done), y0);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + done + 64), y1);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + done + 128), y2);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d + done + 192), y3);
  }
  _mm_sfence();
  return done;
}
#endif

}  // namespace

void StreamCopy(void* dst, const void* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* p = static_cast<const unsigned char*>(src);
#if defined(__x86_64__)
  const size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
  if (n >= head + 256 && HaveStreaming()) {
    std::memcpy(d, p, head);
    const size_t done = head + StreamRounds(d + head, p + head, n - head);
    std::memcpy(d + done, p + done, n - done);
    return;
  }
#endif
  std::memcpy(d, p, n);
}

bool StreamCopyIsNonTemporal() {
#if defined(__x86_64__)
  return HaveStreaming();
#else
  return false;
#endif
}

}  // namespace tandem
