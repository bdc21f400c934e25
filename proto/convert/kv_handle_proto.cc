#include "proto/convert/kv_handle_proto.h"

#include <utility>

#include "proto/convert/kv_layout_proto.h"

namespace tandem {

absl::StatusOr<KvHandle> KvHandleFromProto(const v1::KvHandle& p) {
  absl::StatusOr<KvLayout> layout = FromProto(p.layout(), InstanceRole::kPrefill);
  if (!layout.ok()) return layout.status();
  KvHandle kv;
  kv.engine_id = p.engine_id();
  kv.epoch = p.epoch();
  kv.request_id = p.request_id();
  kv.block_table.assign(p.block_table().begin(), p.block_table().end());
  kv.num_tokens = p.num_tokens();
  kv.layout = *std::move(layout);
  kv.lease_expiry = absl::FromUnixMillis(p.lease_expiry_unix_ms());
  kv.generation = p.generation();
  kv.prefill_address = p.prefill_address();
  kv.block_generations.assign(p.block_generations().begin(), p.block_generations().end());
  kv.kv_digests.assign(p.kv_digests().begin(), p.kv_digests().end());
  return kv;
}

v1::KvHandle ToProto(const KvHandle& kv) {
  v1::KvHandle p;
  p.set_engine_id(kv.engine_id);
  p.set_epoch(kv.epoch);
  p.set_request_id(kv.request_id);
  p.mutable_block_table()->Add(kv.block_table.begin(), kv.block_table.end());
  p.set_num_tokens(kv.num_tokens);
  *p.mutable_layout() = ToProto(kv.layout);
  p.set_lease_expiry_unix_ms(absl::ToUnixMillis(kv.lease_expiry));
  p.set_generation(kv.generation);
  p.set_prefill_address(kv.prefill_address);
  p.mutable_block_generations()->Add(kv.block_generations.begin(), kv.block_generations.end());
  p.mutable_kv_digests()->Add(kv.kv_digests.begin(), kv.kv_digests.end());
  return p;
}

}  // namespace tandem
