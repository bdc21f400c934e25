#include "kv_transfer/transfer_types.h"

#include <string_view>

#include "common/fnv1a.h"

namespace tandem {
namespace {

// Appends `v` as `bytes` little-endian bytes: a canonical encoding, independent of the host.
void AppendLe(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

int64_t TransferPlan::total_bytes() const {
  int64_t total = 0;
  for (const auto& rank_copies : copies) {
    for (const TransferCopy& c : rank_copies) total += c.length;
  }
  return total;
}

int64_t TransferPlan::total_copies() const {
  int64_t total = 0;
  for (const auto& rank_copies : copies) total += static_cast<int64_t>(rank_copies.size());
  return total;
}

uint64_t CompatibilityHash(const std::string& model_identity, const KvLayout& layout) {
  // Field order and widths are part of the wire contract: changing them changes every hash and
  // makes old and new peers refuse each other, so bump kKvProtocolVersion along with them.
  std::string enc = "tandem-kv";
  AppendLe(enc, kKvProtocolVersion, 4);
  AppendLe(enc, model_identity.size(), 8);  // length prefix: no ambiguity with what follows
  enc += model_identity;
  AppendLe(enc, static_cast<uint32_t>(layout.dims.num_layers), 4);
  AppendLe(enc, static_cast<uint32_t>(layout.dims.head_dim), 4);
  AppendLe(enc, static_cast<uint32_t>(layout.dims.num_kv_heads), 4);
  AppendLe(enc, static_cast<uint8_t>(layout.dtype), 1);
  return Fnv1a64(enc);
}

}  // namespace tandem
