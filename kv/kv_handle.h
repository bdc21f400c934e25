// KvHandle: a prefill instance's lease on one prompt's KV, as the decode side holds it — which
// blocks of which instance (engine id and epoch), in which layout, until when, and what a renewal
// or release must quote back (generation, block generations). The domain form of
// tandem.v1.KvHandle (decode_node/decode_service.cc converts it).
//
// Pure (std + abseil time + kv/kv_layout.h). Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "kv/kv_layout.h"

namespace tandem {

// A prefill instance's lease on one prompt's KV.
struct KvHandle {
  std::string engine_id;
  uint64_t epoch = 0;  // changes when the prefill instance restarts
  std::string request_id;
  std::vector<int32_t> block_table;  // the prefill instance's virtual block ids
  int64_t num_tokens = 0;            // tokens whose KV the blocks hold
  KvLayout layout;                   // the prefill instance's layout
  absl::Time lease_expiry;
  uint64_t generation = 0;      // identifies this allocation; release/renew quote it
  std::string prefill_address;  // where the metadata, renewals and releases are served
  // Generation fencing: block_table[i]'s generation when the lease was taken; ReleaseKv quotes
  // them back (empty from a prefill that does not send them).
  std::vector<uint32_t> block_generations;
  // KV digests (kv_transfer/kv_digest.h); empty: not sent (digests off, or an early handle).
  std::vector<uint32_t> kv_digests;
};

}  // namespace tandem
