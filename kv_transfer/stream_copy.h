// StreamCopy: memcpy with non-temporal stores, for copies whose destination is far larger than
// the cache and is not read again soon — a large KV pull landing in the decode node's pool (the
// first decode step reads it after the whole pull). Each destination line is written without
// being read into the cache first (a plain store's read-for-ownership), so such a copy moves 2
// bytes of memory traffic per byte instead of 3. glibc's memcpy does this too, but only above a
// threshold sized from the cache it detects (on the build VM 240 MiB, per call), never for the
// block-sized copies a pull is made of.
//
// The same copy with the CRC folded in is Crc32cStreamCopy (crc32c.h); both stream only on CPUs
// where that CRC folds with VPCLMULQDQ (AVX-512), so a pull with and without digests stores the
// same way. Elsewhere, and for dst's bytes before its first 64-byte boundary, memcpy. Pure: std
// only; thread-safe. The stores are fenced (sfence) before StreamCopy returns.
#pragma once

#include <cstddef>

namespace tandem {

// Copies n bytes src → dst (not overlapping).
void StreamCopy(void* dst, const void* src, size_t n);

// Whether StreamCopy and Crc32cStreamCopy use non-temporal stores on this CPU.
bool StreamCopyIsNonTemporal();

}  // namespace tandem
