#include "kv_transfer/ucx/metadata_proto.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "attention/parallel_layout.h"
#include "common/fnv1a.h"
#include "common/status_macros.h"
#include "kv_transfer/ucx/remote_rank.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "proto/convert/kv_layout_proto.h"

namespace tandem {
namespace {

// Canonical encoding: fixed-width little-endian integers, strings length-prefixed.
void AppendLe(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t Checksum(absl::string_view worker_address, uint64_t pool_base, int64_t pool_bytes,
                  absl::string_view rkey, int32_t memory_type) {
  std::string enc;
  enc.reserve(worker_address.size() + rkey.size() + 32);
  AppendLe(enc, worker_address.size());
  enc.append(worker_address.data(), worker_address.size());
  AppendLe(enc, pool_base);
  AppendLe(enc, static_cast<uint64_t>(pool_bytes));
  AppendLe(enc, rkey.size());
  enc.append(rkey.data(), rkey.size());
  // Host pools hash as before memory types existed.
  if (memory_type != 0) AppendLe(enc, static_cast<uint64_t>(memory_type));
  return Fnv1a64(enc);
}

}  // namespace

v1::TransferMetadata ToProto(const TransferMetadata& m) {
  v1::TransferMetadata p;
  p.set_engine_id(m.engine_id);
  p.set_epoch(m.epoch);
  p.set_compat_hash(m.compat_hash);
  *p.mutable_layout() = ToProto(m.layout);
  const ParallelConfig& cfg = m.layout.parallel;
  for (size_t r = 0; r < m.ranks.size(); ++r) {
    const RankTransferInfo& info = m.ranks[r];
    const RankPlacement place = PlaceRank(cfg, m.layout.dims, static_cast<int32_t>(r));
    v1::RankTransferInfo* out = p.add_ranks();
    out->set_worker_address(info.worker_address);
    out->set_pool_base(info.pool_base);
    out->set_pool_bytes(info.pool_bytes);
    out->set_rkey(info.rkey);
    out->set_kv_head_begin(place.kv_head_begin);
    out->set_kv_head_count(place.kv_head_count);
    out->set_dcp_rank(place.dcp_rank);
    out->set_memory_type(info.memory_type == KvMemoryType::kCuda ? v1::POOL_MEMORY_CUDA
                                                                 : v1::POOL_MEMORY_HOST);
    out->set_checksum(Checksum(info.worker_address, info.pool_base, info.pool_bytes, info.rkey,
                               static_cast<int32_t>(out->memory_type())));
  }
  return p;
}

absl::StatusOr<TransferMetadata> FromProto(const v1::TransferMetadata& p) {
  if (!p.has_layout()) return absl::InvalidArgumentError("transfer metadata: layout is missing");
  TransferMetadata m;
  m.engine_id = p.engine_id();
  m.epoch = p.epoch();
  m.compat_hash = p.compat_hash();
  absl::StatusOr<KvLayout> layout = FromProto(p.layout(), InstanceRole::kPrefill);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer metadata: ", layout.status().message()));
  }
  m.layout = *std::move(layout);

  for (int r = 0; r < p.ranks_size(); ++r) {
    const v1::RankTransferInfo& in = p.ranks(r);
    if (in.checksum() != Checksum(in.worker_address(), in.pool_base(), in.pool_bytes(), in.rkey(),
                                  static_cast<int32_t>(in.memory_type()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transfer metadata: ranks[", r,
          "].checksum does not match its worker_address/pool_base/pool_bytes/rkey/memory_type "
          "(garbled in transit or produced by an incompatible peer)"));
    }
    if (in.memory_type() != v1::POOL_MEMORY_HOST && in.memory_type() != v1::POOL_MEMORY_CUDA) {
      return absl::InvalidArgumentError(absl::StrCat(
          "transfer metadata: ranks[", r, "].memory_type ", static_cast<int>(in.memory_type()),
          " is not a memory type this build knows"));
    }
    m.ranks.push_back(RankTransferInfo{
        in.worker_address(), in.pool_base(), in.pool_bytes(), in.rkey(),
        in.memory_type() == v1::POOL_MEMORY_CUDA ? KvMemoryType::kCuda : KvMemoryType::kHost});
  }
  TANDEM_RETURN_IF_ERROR(ValidateTransferMetadata(m, LinkedUcxRkeyLayout()));

  // Placement is derived; a mismatch means the peer places heads or tokens differently.
  for (int r = 0; r < p.ranks_size(); ++r) {
    const v1::RankTransferInfo& in = p.ranks(r);
    const RankPlacement place = PlaceRank(m.layout.parallel, m.layout.dims, r);
    if (in.kv_head_begin() != place.kv_head_begin || in.kv_head_count() != place.kv_head_count ||
        in.dcp_rank() != place.dcp_rank) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "transfer metadata: ranks[%d] placement (kv_head_begin=%d, kv_head_count=%d, "
          "dcp_rank=%d) differs from this build's placement for %s (%d, %d, %d)",
          r, in.kv_head_begin(), in.kv_head_count(), in.dcp_rank(), m.layout.parallel.ToString(),
          place.kv_head_begin, place.kv_head_count, place.dcp_rank));
    }
  }
  return m;
}

std::string SerializeTransferMetadata(const TransferMetadata& metadata) {
  return ToProto(metadata).SerializeAsString();
}

absl::StatusOr<TransferMetadata> ParseTransferMetadata(absl::string_view bytes) {
  v1::TransferMetadata proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("transfer metadata: ", bytes.size(),
                     " bytes are not a serialized tandem.v1.TransferMetadata"));
  }
  return FromProto(proto);
}

}  // namespace tandem
