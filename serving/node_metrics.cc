#include "serving/node_metrics.h"

#include <utility>

#include "common/status_macros.h"

namespace tandem {

absl::Status RegisterNodeLoadGauges(MetricsRegistry& r, NodeLoadReaders readers) {
  TANDEM_RETURN_IF_ERROR(r.AddCallbackGauge("tandem_num_requests_running",
                                            "Requests in this node's engine batch.",
                                            std::move(readers.running)));
  TANDEM_RETURN_IF_ERROR(
      r.AddCallbackGauge("tandem_num_requests_waiting",
                         "Requests waiting on this node: queued for the engine or for KV capacity.",
                         std::move(readers.waiting)));
  TANDEM_RETURN_IF_ERROR(r.AddCallbackGauge("tandem_kv_blocks_used",
                                            "KV cache blocks allocated (per rank pool).",
                                            std::move(readers.blocks_used)));
  return r.AddCallbackGauge("tandem_kv_blocks_free", "KV cache blocks free (per rank pool).",
                            std::move(readers.blocks_free));
}

absl::StatusOr<PrefillMetrics> PrefillMetrics::Register(MetricsRegistry& r) {
  PrefillMetrics m;
  TANDEM_ASSIGN_OR_RETURN(m.prompt_tokens, r.AddCounter("tandem_prompt_tokens_total",
                                                        "Prompt tokens prefilled successfully."));
  return m;
}

absl::Status RegisterPrefixCacheMetrics(MetricsRegistry& r, PrefixCacheReaders readers) {
  // vLLM's prefix_cache_queries / prefix_cache_hits, in tokens: hit rate = hits / queries.
  TANDEM_RETURN_IF_ERROR(r.AddCallbackCounter(
      "tandem_prefix_cache_queries_total",
      "Prompt tokens looked up in the prefix cache (every admitted prompt's length).",
      std::move(readers.query_tokens)));
  TANDEM_RETURN_IF_ERROR(
      r.AddCallbackCounter("tandem_prefix_cache_hits_total",
                           "Prompt tokens served from the prefix cache instead of computed.",
                           std::move(readers.hit_tokens)));
  TANDEM_RETURN_IF_ERROR(
      r.AddCallbackCounter("tandem_prompt_tokens_computed_total",
                           "Prompt tokens run through the model (cached prefixes excluded).",
                           std::move(readers.computed_tokens)));
  TANDEM_RETURN_IF_ERROR(r.AddCallbackCounter(
      "tandem_prefix_cache_evictions_total",
      "KV blocks evicted from the prefix cache (least recently used first, under pressure).",
      std::move(readers.evictions)));
  return r.AddCallbackGauge(
      "tandem_prefix_cache_blocks",
      "KV blocks (virtual, block_size x dcp tokens) held by the prefix cache, in use or not.",
      std::move(readers.blocks));
}

absl::Status RegisterLeaseMetrics(MetricsRegistry& r, LeaseReaders readers) {
  TANDEM_RETURN_IF_ERROR(r.AddCallbackGauge(
      "tandem_kv_leases_active",
      "Prefilled KV held under a lease, waiting for a decode node to pull and release it.",
      std::move(readers.active)));
  TANDEM_RETURN_IF_ERROR(r.AddCallbackCounter(
      "tandem_kv_leases_expired_total",
      "KV leases that expired before anyone released them (their blocks were reclaimed).",
      std::move(readers.expired)));
  return r.AddCallbackCounter("tandem_kv_leases_released_total",
                              "KV leases released while still held (by a decode node after its "
                              "pull, by the router, or on a cancelled prefill).",
                              std::move(readers.released));
}

absl::StatusOr<DecodeMetrics> DecodeMetrics::Register(MetricsRegistry& r) {
  DecodeMetrics m;
  TANDEM_ASSIGN_OR_RETURN(
      m.generation_tokens,
      r.AddCounter("tandem_generation_tokens_total",
                   "Tokens sampled by this decode node (each request's first token is sampled "
                   "by its prefill node and not counted here)."));
  TANDEM_ASSIGN_OR_RETURN(
      m.transfer_bytes, r.AddCounterFamily<1>("tandem_kv_transfer_bytes_total",
                                              "KV cache bytes pulled, by prefill peer.", {"peer"}));
  TANDEM_ASSIGN_OR_RETURN(
      m.transfer_seconds,
      r.AddCounterFamily<1>("tandem_kv_transfer_seconds_total",
                            "Time spent pulling KV cache, by prefill peer.", {"peer"}));
  TANDEM_ASSIGN_OR_RETURN(
      m.transfer_copies,
      r.AddCounterFamily<1>("tandem_kv_transfer_copies_total",
                            "One-sided copies issued to pull KV cache, by prefill peer.",
                            {"peer"}));
  TANDEM_ASSIGN_OR_RETURN(
      m.transfer_failures,
      r.AddCounterFamily<1>("tandem_kv_transfer_failures_total",
                            "Decode calls whose KV handshake, pull or lease confirmation with the "
                            "prefill peer failed, by prefill peer.",
                            {"peer"}));
  TANDEM_ASSIGN_OR_RETURN(
      m.pipelined_transfers,
      r.AddCounter("tandem_kv_pipelined_transfers_total",
                   "Decode calls whose KV was pulled while its prefill ran (pipelined transfer), "
                   "successful ones."));
  TANDEM_ASSIGN_OR_RETURN(
      m.pipelined_chunks_before_prefill_done,
      r.AddCounter("tandem_kv_pipelined_chunks_before_prefill_done_total",
                   "Pulls of pipelined transfers done while the prefill was still computing the "
                   "prompt (each covers the tokens computed since the previous pull)."));
  return m;
}

void DecodeMetrics::RecordTransfer(const std::string& peer, double bytes, double seconds,
                                   double copies) const {
  transfer_bytes->WithLabels({peer}).Increment(bytes);
  transfer_seconds->WithLabels({peer}).Increment(seconds);
  transfer_copies->WithLabels({peer}).Increment(copies);
}

}  // namespace tandem
