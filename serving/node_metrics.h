// The Prometheus metrics of prefill and decode nodes (docs/operations.md lists them), served at
// /metrics on --metrics_listen. Names follow vLLM's where one exists, with the tandem_ prefix.
//
//   both:    tandem_num_requests_running / _waiting, tandem_kv_blocks_used / _free (read from the
//            node at scrape time)
//   prefill: tandem_prompt_tokens_total, tandem_prompt_tokens_computed_total,
//            tandem_prefix_cache_{queries,hits,evictions}_total, tandem_prefix_cache_blocks,
//            tandem_kv_leases_active, tandem_kv_leases_expired_total / _released_total
//   decode:  tandem_generation_tokens_total,
//   tandem_kv_transfer_{bytes,seconds,copies,failures}_total
//            by {peer} (the prefill node's address)
//
// The structs only point into the MetricsRegistry that owns the metrics; updates are
// thread-safe (common/metrics.h). Readers registered here are called on the scraping thread and
// must stay valid while the registry can be rendered.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics.h"

namespace tandem {

// What a node's load gauges read at scrape time.
struct NodeLoadReaders {
  std::function<double()> running;      // requests in the engine's batch
  std::function<double()> waiting;      // requests queued or waiting for KV capacity
  std::function<double()> blocks_used;  // KV blocks allocated (rank 0's pool; ranks are equal)
  std::function<double()> blocks_free;
};
absl::Status RegisterNodeLoadGauges(MetricsRegistry& registry, NodeLoadReaders readers);

struct PrefillMetrics {
  Counter* prompt_tokens = nullptr;  // prompt tokens of successful prefills

  static absl::StatusOr<PrefillMetrics> Register(MetricsRegistry& registry);
};

struct LeaseReaders {
  std::function<double()> active;    // leases held now
  std::function<double()> expired;   // cumulative: leases that expired unreleased
  std::function<double()> released;  // cumulative: leases released while still held
};
absl::Status RegisterLeaseMetrics(MetricsRegistry& registry, LeaseReaders readers);

// The prefix cache of a prefill node (engine/prefix_cache.h); all cumulative but `blocks`. With
// the cache off the readers return 0 and computed == every prompt token run.
struct PrefixCacheReaders {
  std::function<double()> query_tokens;     // prompt tokens looked up (admitted prompts)
  std::function<double()> hit_tokens;       // of those, served from the cache
  std::function<double()> computed_tokens;  // prompt tokens run through the model
  std::function<double()> evictions;        // blocks evicted
  std::function<double()> blocks;           // blocks cached now (gauge)
};
absl::Status RegisterPrefixCacheMetrics(MetricsRegistry& registry, PrefixCacheReaders readers);

struct DecodeMetrics {
  Counter* generation_tokens = nullptr;          // tokens this node sampled (after the first token)
  Family<Counter, 1>* transfer_bytes = nullptr;  // {peer}: KV bytes pulled
  Family<Counter, 1>* transfer_seconds = nullptr;   // {peer}: time spent pulling
  Family<Counter, 1>* transfer_copies = nullptr;    // {peer}: one-sided copies issued
  Family<Counter, 1>* transfer_failures = nullptr;  // {peer}: KV handshakes/pulls that failed
  // Pipelined transfers (docs/kv_transfer.md): Decode calls that pulled an early handle, and
  // their pulls done while the prefill was still computing the prompt.
  Counter* pipelined_transfers = nullptr;
  Counter* pipelined_chunks_before_prefill_done = nullptr;

  static absl::StatusOr<DecodeMetrics> Register(MetricsRegistry& registry);

  // A finished pull from `peer`.
  void RecordTransfer(const std::string& peer, double bytes, double seconds, double copies) const;
};

}  // namespace tandem
