// CRC32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of KV digests
// (kv_digest.h). Pure: std only. Thread-safe (no state besides a table built once).
//
// Paths, chosen at run time: on x86-64 CPUs with AVX-512 and VPCLMULQDQ, inputs of 256 bytes and
// more are folded with 512-bit carry-less multiplies (crc32c.cc); otherwise with SSE4.2 the crc32
// instruction does the work, three independent streams at a time over large inputs (the
// instruction's latency is 3 cycles, its throughput one per cycle); elsewhere a slicing-by-8
// table. All give the same values (tests/kv_transfer/kv_digest_test.cc checks them against each
// other and the standard check value CRC32C("123456789") = 0xE3069283).
//
// Why CRC32C and not XXH3 (measured side by side on the build VM, AMD EPYC with AVX-512, 1 GiB
// in 2 MiB pieces, libxxhash-dev 0.8.1 inlined, 2026-12-02): from DRAM CRC32C/VPCLMULQDQ 19-32
// GB/s against XXH3 17-22 GB/s (AVX2 or AVX-512 build) and 12.5 (the SSE2 build a distribution
// library carries); L2-resident 42-47 against 42-62. Neither is the bottleneck — the copy is —
// and only a CRC can (1) be folded into the copy itself (Crc32cCopy: the bytes are checked in
// the registers that store them, no second pass), (2) be combined (Crc32cCombine: block checks
// recorded once bind to any later request, span CRCs of a pull combine into unit digests), and
// (3) catch every burst error up to 32 bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem {

// Extends `crc` (the value for the bytes before; 0 to start) over data[0, n). Crc32c(0, "", 0)
// is 0; the usual pre/post inversion is done inside, so calls chain:
// Crc32c(Crc32c(0, a, n), b, m) == Crc32c(0, a‖b, n + m).
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

// Crc32c(c, B) from c and Crc32c(0, B) for |B| = len_b, without B's bytes: CRCs are affine, so
// Crc32c(c, B) == shift(c over len_b zero bytes) ^ Crc32c(0, B) (zlib's crc32_combine, for this
// polynomial). What lets a block's content CRC, computed once when it was written, be bound to a
// later request (kv_digest.h). O(log len_b).
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// Copies n bytes from src to dst (which must not overlap) and returns Crc32c(crc, src, n) of the
// bytes copied — one pass: with VPCLMULQDQ every 64-byte load is both stored and folded, so the
// CRC adds no memory traffic to the copy (what a KV pull that moves the bytes itself uses,
// kv_transfer/copy_crcs.h); otherwise the copy goes in L1-sized steps, each CRCed while cached.
uint32_t Crc32cCopy(uint32_t crc, void* dst, const void* src, size_t n);

// Crc32cCopy with non-temporal stores where it folds with VPCLMULQDQ (from dst's first 64-byte
// boundary on; fenced before it returns): the destination lines are written without being read
// into the cache first, so a copy far larger than the cache moves 2 bytes of memory traffic per
// byte instead of 3 — what a large KV pull wants (the bytes are read again only by later decode
// steps; StreamCopy in stream_copy.h is the same copy without the CRC). Elsewhere Crc32cCopy.
uint32_t Crc32cStreamCopy(uint32_t crc, void* dst, const void* src, size_t n);

// The portable implementation (what Crc32c uses without SSE4.2). For tests and benchmarks.
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n);

// The SSE4.2 path (the portable one without SSE4.2): what Crc32c uses without VPCLMULQDQ. For
// tests and benchmarks.
uint32_t Crc32cSse42(uint32_t crc, const void* data, size_t n);

// Whether Crc32c uses the SSE4.2 instruction on this CPU.
bool Crc32cIsHardware();

// The path Crc32c takes for large inputs on this CPU: "vpclmulqdq", "sse4.2" or "table".
const char* Crc32cImplementation();

}  // namespace tandem
