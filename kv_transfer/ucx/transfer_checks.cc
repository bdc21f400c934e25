#include "kv_transfer/ucx/transfer_checks.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "attention/parallel_layout.h"

namespace tandem {
namespace {

// [offset, offset + length) inside [0, limit), without overflow.
bool RangeInside(int64_t offset, int64_t length, int64_t limit) {
  return offset >= 0 && length >= 0 && offset <= limit && length <= limit - offset;
}

std::string Source(const TransferMetadata& m) {
  return absl::StrCat("source engine '", m.engine_id, "' epoch ", m.epoch);
}

}  // namespace

PackedRkeyLayout PackedRkeyLayoutFor(uint32_t major, uint32_t minor) {
  return major > 1 || (major == 1 && minor >= 20) ? PackedRkeyLayout::kEntriesSysDevice
                                                  : PackedRkeyLayout::kEntries;
}

absl::Status ValidatePackedRkeyShape(absl::string_view rkey, PackedRkeyLayout layout) {
  constexpr size_t kHeader = sizeof(uint64_t) + sizeof(uint8_t);  // md map + memory type
  if (rkey.size() < kHeader) {
    return absl::InvalidArgumentError(absl::StrCat("packed rkey is truncated: ", rkey.size(),
                                                   " bytes, the header alone is ", kHeader));
  }
  uint64_t md_map = 0;
  for (size_t i = 0; i < sizeof(uint64_t); ++i) {
    md_map |= static_cast<uint64_t>(static_cast<uint8_t>(rkey[i])) << (8 * i);
  }
  size_t pos = kHeader;
  for (int md = 0; md < 64; ++md) {
    if ((md_map >> md & 1) == 0) continue;
    if (pos >= rkey.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("packed rkey is truncated: the entry of memory domain ", md,
                       " starts at byte ", pos, " of ", rkey.size()));
    }
    const size_t length = static_cast<uint8_t>(rkey[pos]);
    pos += 1 + length;
    if (pos > rkey.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("packed rkey is truncated: the entry of memory domain ", md,
                       " ends at byte ", pos, " of ", rkey.size()));
    }
  }
  if (layout == PackedRkeyLayout::kEntries || md_map == 0) return absl::OkStatus();
  constexpr uint8_t kUnknownDevice = 0xFF;  // UCS_SYS_DEVICE_ID_UNKNOWN, also the terminator
  constexpr size_t kDistanceBytes = 3;      // device id, fp8 latency, fp8 bandwidth
  if (pos >= rkey.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed rkey is truncated: the system device byte UCX 1.20 and later put "
                     "after the entries would be byte ",
                     pos, " of ", rkey.size()));
  }
  const uint8_t sys_dev = static_cast<uint8_t>(rkey[pos++]);
  if (sys_dev == kUnknownDevice) return absl::OkStatus();
  while (true) {
    if (pos >= rkey.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("packed rkey is truncated: the distances of system device ", sys_dev & 0x7F,
                       " have no terminator (0xFF) within its ", rkey.size(), " bytes"));
    }
    if (static_cast<uint8_t>(rkey[pos]) == kUnknownDevice) return absl::OkStatus();
    if (rkey.size() - pos < kDistanceBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("packed rkey is truncated: the distance at byte ", pos, " ends at byte ",
                       pos + kDistanceBytes, " of ", rkey.size()));
    }
    pos += kDistanceBytes;
  }
}

absl::Status ValidateTransferMetadata(const TransferMetadata& m, PackedRkeyLayout rkeys) {
  if (m.engine_id.empty()) {
    return absl::InvalidArgumentError("transfer metadata: engine_id is empty");
  }
  const absl::Status layout =
      ValidateParallelConfig(m.layout.parallel, m.layout.dims, InstanceRole::kPrefill);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer metadata of ", Source(m), ": layout: ", layout.message()));
  }
  if (static_cast<int64_t>(m.ranks.size()) != m.layout.world()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "transfer metadata of ", Source(m), ": ranks has ", m.ranks.size(), " entries but layout (",
        m.layout.parallel.ToString(), ") has world ", m.layout.world()));
  }
  for (size_t r = 0; r < m.ranks.size(); ++r) {
    const RankTransferInfo& info = m.ranks[r];
    const std::string field = absl::StrCat("transfer metadata of ", Source(m), ": ranks[", r, "].");
    if (info.worker_address.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, "worker_address is empty"));
    }
    if (info.rkey.empty()) return absl::InvalidArgumentError(absl::StrCat(field, "rkey is empty"));
    const absl::Status rkey_shape = ValidatePackedRkeyShape(info.rkey, rkeys);
    if (!rkey_shape.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(field, "rkey: ", rkey_shape.message()));
    }
    if (info.pool_base == 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, "pool_base is 0"));
    }
    if (info.pool_bytes <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "pool_bytes must be > 0, got ", info.pool_bytes));
    }
    if (info.pool_base >
        std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(info.pool_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "pool_base + pool_bytes overflows the address space"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckHandshake(uint64_t expected_compat_hash, const TransferMetadata& m) {
  const absl::Status valid = ValidateTransferMetadata(m);
  if (!valid.ok()) return valid;
  if (m.compat_hash != expected_compat_hash) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "incompatible KV source: %s has compatibility hash %#x, this instance expects %#x "
        "(model identity, layers, head_dim, KV heads, KV dtype or protocol version differ)",
        Source(m), m.compat_hash, expected_compat_hash));
  }
  return absl::OkStatus();
}

absl::Status ValidateCopies(absl::Span<const TransferCopy> copies, const TransferMetadata& source,
                            int64_t local_pool_bytes) {
  const int64_t num_ranks = static_cast<int64_t>(source.ranks.size());
  for (size_t i = 0; i < copies.size(); ++i) {
    const TransferCopy& c = copies[i];
    if (c.length <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("copy ", i, ": length must be > 0, got ", c.length));
    }
    if (c.src_rank < 0 || c.src_rank >= num_ranks) {
      return absl::InvalidArgumentError(
          absl::StrCat("copy ", i, ": source rank ", c.src_rank, " outside [0, ", num_ranks, ")"));
    }
    const int64_t src_limit = source.ranks[c.src_rank].pool_bytes;
    if (!RangeInside(c.src_offset, c.length, src_limit)) {
      return absl::InvalidArgumentError(
          absl::StrCat("copy ", i, ": source range [", c.src_offset, ", +", c.length,
                       ") exceeds source rank ", c.src_rank, "'s pool of ", src_limit, " bytes"));
    }
    if (!RangeInside(c.dst_offset, c.length, local_pool_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("copy ", i, ": destination range [", c.dst_offset, ", +", c.length,
                       ") exceeds the local pool of ", local_pool_bytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidatePull(const TransferMetadata& source, absl::Span<const TransferCopy> copies,
                          int64_t local_pool_bytes, const PullOptions& options,
                          PackedRkeyLayout rkeys) {
  if (absl::Status s = ValidateTransferMetadata(source, rkeys); !s.ok()) return s;
  if (options.max_in_flight < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_in_flight must be >= 1, got ", options.max_in_flight));
  }
  if (options.stall_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("stall_timeout must be > 0");
  }
  return ValidateCopies(copies, source, local_pool_bytes);
}

}  // namespace tandem
