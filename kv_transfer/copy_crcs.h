// CopyCrcs: the KV digest check fused into a pull's copy (docs/kv_transfer.md "Provable KV",
// issue 28 item 4). Where a puller moves bytes through this process itself (a shared-memory pool
// UCX mapped here, read with loads; the in-process fake), it computes the CRC32C of chosen spans
// of each copy in the same pass (Crc32cCopy: every load is stored and folded), so the decode
// node's check reads nothing again: a unit's digest is the combination of its spans' CRCs
// (kv_digest.h LandedCrcs). Spans the transport lands without passing them through this process
// (UCX gets over TCP or RDMA) are left uncomputed, and the check reads those bytes back.
//
// Pure: std + abseil. A CopyCrcs is filled by one pull on one thread; after the pull it is read
// only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kv_transfer/crc32c.h"
#include "kv_transfer/stream_copy.h"

namespace tandem {

// [offset, offset + length) inside one copy (offset from the copy's first byte).
struct CrcSpan {
  int64_t offset = 0;
  int64_t length = 0;
};

// For the copies of one Execute (one destination rank): copy i's spans are
// spans[first[i], first[i + 1]) — ascending, disjoint, inside the copy (KvDigestCrcRequests
// builds them: the prompt pieces a digest unit is made of). crcs[k] and computed[k] are filled
// by the puller: computed[k] = 1 once crcs[k] = Crc32c(0, the bytes of span k as stored).
struct CopyCrcs {
  std::vector<int64_t> first;  // [copies + 1]; empty: nothing requested
  std::vector<CrcSpan> spans;
  std::vector<uint32_t> crcs;     // [spans]
  std::vector<uint8_t> computed;  // [spans]

  int64_t copies() const { return first.empty() ? 0 : static_cast<int64_t>(first.size()) - 1; }
};

// Copies `length` bytes src → dst (not overlapping) as copy `index` of *crcs, CRCing its spans
// in the same pass and marking them computed; gaps between spans are plain copies. crcs null,
// or index outside it: a plain copy. stream: with non-temporal stores (StreamCopy and
// Crc32cStreamCopy: for pulls far larger than the cache), so a pull stores the same way with and
// without CRCs.
inline void CopyWithCrcs(std::byte* dst, const std::byte* src, int64_t length, CopyCrcs* crcs,
                         int64_t index, bool stream = false) {
  const auto copy = [stream](std::byte* d, const std::byte* s, int64_t n) {
    if (stream) {
      StreamCopy(d, s, static_cast<size_t>(n));
    } else {
      std::memcpy(d, s, static_cast<size_t>(n));
    }
  };
  if (crcs == nullptr || index < 0 || index >= crcs->copies()) {
    copy(dst, src, length);
    return;
  }
  int64_t at = 0;
  for (int64_t k = crcs->first[index]; k < crcs->first[index + 1]; ++k) {
    const CrcSpan& s = crcs->spans[k];
    if (s.offset < at || s.offset + s.length > length) continue;  // malformed: left uncomputed
    copy(dst + at, src + at, s.offset - at);
    const auto n = static_cast<size_t>(s.length);
    crcs->crcs[k] = stream ? Crc32cStreamCopy(0, dst + s.offset, src + s.offset, n)
                           : Crc32cCopy(0, dst + s.offset, src + s.offset, n);
    crcs->computed[k] = 1;
    at = s.offset + s.length;
  }
  copy(dst + at, src + at, length - at);
}

}  // namespace tandem
