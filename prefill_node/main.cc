// tandem-prefill: parses flags and wires a PrefillNode to its gRPC service
// (serving/node_process.h).
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flag_dashes.h"
#include "kv_transfer/ucx/ucx_transport.h"
#include "prefill_node/prefill_node.h"
#include "prefill_node/prefill_service.h"
#include "serving/instance_flags.h"
#include "serving/node_kv_transport.h"
#include "serving/node_metrics.h"
#include "serving/node_process.h"
#include "serving/served_model_name.h"
#include "serving/server_runner.h"

ABSL_FLAG(int32_t, max_prefill_tokens, 2048,
          "tokens per prefill step (longer prompts are chunked)");
ABSL_FLAG(int32_t, queue_timeout_ms, 30000, "how long a prompt may wait for KV capacity");
ABSL_FLAG(int32_t, lease_ms, 30000, "default KV lease after a prefill");
ABSL_FLAG(std::string, engine_id, "", "engine id in KV handles (default: prefill-<address>)");
ABSL_FLAG(bool, prefix_cache, true,
          "keep full KV blocks of finished prompts and reuse them for prompts sharing the prefix "
          "(false: compute every prompt in full)");
ABSL_FLAG(bool, kv_digests, true,
          "send CRC32C digests of every KV block shard with each KV handle, which the decode "
          "node checks before decoding (docs/kv_transfer.md, Provable KV); false only to "
          "measure their cost");
ABSL_FLAG(int32_t, testing_flip_kv_byte, 0,
          "testing only (fault injection): flip one KV byte of each of the first N prompts after "
          "their digests are computed, so the decode node's digest check must catch it");
ABSL_FLAG(int64_t, prefix_cache_max_blocks, 0,
          "most KV blocks the prefix cache keeps (0 = as many as the pool holds)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Tandem prefill instance. See docs/configuration.md.");
  tandem::NormalizeFlagDashes(argc, argv);
  absl::ParseCommandLine(argc, argv);
  tandem::InstallShutdownSignals();
  absl::StatusOr<tandem::InstanceOptions> instance = tandem::InstanceOptionsFromFlags();
  if (!instance.ok()) {
    std::fprintf(stderr, "tandem-prefill: %s\n", instance.status().ToString().c_str());
    return 1;
  }
  tandem::MetricsRegistry metrics;
  absl::StatusOr<tandem::PrefillMetrics> prefill_metrics =
      tandem::PrefillMetrics::Register(metrics);
  if (!prefill_metrics.ok()) {
    std::fprintf(stderr, "tandem-prefill: %s\n", prefill_metrics.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<tandem::TlsConfig> tls = tandem::NodeTlsFromFlags();
  if (!tls.ok()) {
    std::fprintf(stderr, "tandem-prefill: %s\n", tls.status().ToString().c_str());
    return 1;
  }
  tandem::PrefillServiceImpl service;
  service.drain_gate().SetQueueLimit(absl::GetFlag(FLAGS_max_queued_requests));
  service.SetMetrics(&*prefill_metrics);
  std::unique_ptr<tandem::PrefillNode> node;
  tandem::NodeProcess process;
  process.program = "tandem-prefill";
  process.service = &service;
  process.role = tandem::v1::INSTANCE_ROLE_PREFILL;
  process.metrics = &metrics;
  process.tls = *tls;
  process.start = [&](const std::string& advertise) -> absl::StatusOr<std::string> {
    tandem::PrefillNodeOptions o;
    o.model_path = absl::GetFlag(FLAGS_model);
    absl::StatusOr<std::string> served_name = tandem::ResolveServedModelName(
        absl::GetFlag(FLAGS_served_model_name), absl::GetFlag(FLAGS_model_name), o.model_path);
    if (!served_name.ok()) return served_name.status();
    o.model_name = *std::move(served_name);
    if (!absl::GetFlag(FLAGS_model_name).empty()) {
      std::fprintf(stderr, "tandem-prefill: --model_name is deprecated; use --served_model_name\n");
    }
    o.engine_id = absl::GetFlag(FLAGS_engine_id);
    o.advertised_address = advertise;
    o.instance = *instance;
    o.prefill.max_prefill_tokens = absl::GetFlag(FLAGS_max_prefill_tokens);
    o.prefill.queue_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_queue_timeout_ms));
    o.default_lease = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
    o.prefix_cache = absl::GetFlag(FLAGS_prefix_cache);
    o.prefix_cache_max_blocks = absl::GetFlag(FLAGS_prefix_cache_max_blocks);
    o.kv_digests = absl::GetFlag(FLAGS_kv_digests);
    o.testing_flip_kv_byte = absl::GetFlag(FLAGS_testing_flip_kv_byte);
    absl::StatusOr<tandem::NodeKvTransport> kv =
        tandem::ResolveNodeKvTransport("tandem-prefill", tandem::UcxOptionsFromFlags(),
                                       absl::GetFlag(FLAGS_kv_gpu_direct), &o.instance);
    if (!kv.ok()) return kv.status();
    o.sources = tandem::UcxSourceFactory(kv->ucx, kv->device_pools);
    std::fprintf(stderr, "tandem-prefill: loading %s (%s) on %s\n", o.model_path.c_str(),
                 o.instance.parallel.ToString().c_str(), advertise.c_str());
    absl::StatusOr<std::unique_ptr<tandem::PrefillNode>> created = tandem::PrefillNode::Create(o);
    if (!created.ok()) return created.status();
    node = std::move(created).value();
    tandem::PrefillNode* n = node.get();
    if (absl::Status s = tandem::RegisterNodeLoadGauges(
            metrics,
            {.running = [n] { return double(n->Load().running); },
             .waiting = [n] { return double(n->Load().queued); },
             .blocks_used = [n] { return double(n->Load().total_blocks - n->Load().free_blocks); },
             .blocks_free = [n] { return double(n->Load().free_blocks); }});
        !s.ok()) {
      return s;
    }
    if (absl::Status s = tandem::RegisterLeaseMetrics(
            metrics, {.active = [n] { return double(n->Load().leases); },
                      .expired = [n] { return double(n->Load().leases_expired_total); },
                      .released = [n] { return double(n->Load().leases_released_total); }});
        !s.ok()) {
      return s;
    }
    if (absl::Status s = tandem::RegisterPrefixCacheMetrics(
            metrics, {.query_tokens = [n] { return double(n->Load().prefix_query_tokens); },
                      .hit_tokens = [n] { return double(n->Load().prefix_hit_tokens); },
                      .computed_tokens = [n] { return double(n->Load().computed_prompt_tokens); },
                      .evictions = [n] { return double(n->Load().prefix_evictions); },
                      .blocks = [n] { return double(n->Load().prefix_cached_blocks); }});
        !s.ok()) {
      return s;
    }
    // What the digests cost (bench/serve/kv_digest_ttft.sh: their share of TTFT).
    if (absl::Status s = metrics.AddCallbackCounter(
            "tandem_kv_digest_compute_seconds_total",
            "Time spent computing KV digests (as the engine writes each chunk, and the final "
            "pass); 0 with --kv_digests=false",
            [n] { return absl::ToDoubleSeconds(n->kv_digest_compute_time()); });
        !s.ok()) {
      return s;
    }
    if (!o.prefix_cache) {
      std::fprintf(stderr, "tandem-prefill: prefix cache off (--prefix_cache=false)\n");
    }
    service.SetNode(node.get());
    return absl::StrCat("serving ", node->model_name(), " on ", advertise, " (engine ",
                        node->engine_id(), ", ", node->Load().total_blocks, " blocks per rank)");
  };
  process.start_drain = [&] { service.drain_gate().StartDrain(); };
  // Prefill calls in flight finish; KV already handed out stays servable (GetTransferMetadata,
  // RenewLease, ReleaseKv) until its decode node released it or its lease ran out.
  process.wait_drained = [&](absl::Time deadline) {
    if (!service.drain_gate().WaitIdle(deadline)) return false;
    while (node->Load().leases > 0) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Milliseconds(10));  // leases have no waitable event; poll, bounded
    }
    return true;
  };
  process.stop = [&] {
    service.SetNode(nullptr);
    node.reset();
  };
  return tandem::RunNodeProcess(process);
}
