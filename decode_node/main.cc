// tandem-decode: parses flags and wires a DecodeNode to its gRPC service (serving/node_process.h).
#include <cstdio>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/flag_dashes.h"
#include "decode_node/decode_node.h"
#include "decode_node/decode_service.h"
#include "decode_node/grpc_prefill_client.h"
#include "kv_transfer/ucx/ucx_transport.h"
#include "serving/instance_flags.h"
#include "serving/node_kv_transport.h"
#include "serving/node_metrics.h"
#include "serving/node_process.h"
#include "serving/served_model_name.h"
#include "serving/server_runner.h"

ABSL_FLAG(int32_t, max_batch, 64, "requests decoded together per step (more wait in a queue)");
ABSL_FLAG(int32_t, queue_timeout_ms, 30000, "how long a request may wait for KV capacity");
ABSL_FLAG(int32_t, rpc_timeout_ms, 10000, "deadline of calls to prefill instances");
ABSL_FLAG(int32_t, stall_timeout_ms, 10000, "KV pull without progress for this long fails");
ABSL_FLAG(bool, colocated_prefill, false,
          "also prefill prompts on this instance (Decode calls with prompt_ids; the router's "
          "--colocated=true): one instance serves prefill and decode, no KV transfer");
ABSL_FLAG(int32_t, max_prefill_tokens, 2048,
          "colocated prefill: prompt tokens per forward step (chunked prefill)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Tandem decode instance. See docs/configuration.md.");
  tandem::NormalizeFlagDashes(argc, argv);
  absl::ParseCommandLine(argc, argv);
  tandem::InstallShutdownSignals();
  absl::StatusOr<tandem::InstanceOptions> instance = tandem::InstanceOptionsFromFlags();
  if (!instance.ok()) {
    std::fprintf(stderr, "tandem-decode: %s\n", instance.status().ToString().c_str());
    return 1;
  }
  tandem::MetricsRegistry metrics;
  absl::StatusOr<tandem::DecodeMetrics> decode_metrics = tandem::DecodeMetrics::Register(metrics);
  if (!decode_metrics.ok()) {
    std::fprintf(stderr, "tandem-decode: %s\n", decode_metrics.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<tandem::TlsConfig> tls = tandem::NodeTlsFromFlags();
  if (!tls.ok()) {
    std::fprintf(stderr, "tandem-decode: %s\n", tls.status().ToString().c_str());
    return 1;
  }
  tandem::DecodeServiceImpl service;
  service.drain_gate().SetQueueLimit(absl::GetFlag(FLAGS_max_queued_requests));
  service.SetMetrics(&*decode_metrics);
  std::unique_ptr<tandem::DecodeNode> node;
  tandem::NodeProcess process;
  process.program = "tandem-decode";
  process.service = &service;
  process.role = tandem::v1::INSTANCE_ROLE_DECODE;
  process.metrics = &metrics;
  process.tls = *tls;
  process.start = [&](const std::string& advertise) -> absl::StatusOr<std::string> {
    tandem::DecodeNodeOptions o;
    o.model_path = absl::GetFlag(FLAGS_model);
    absl::StatusOr<std::string> served_name = tandem::ResolveServedModelName(
        absl::GetFlag(FLAGS_served_model_name), absl::GetFlag(FLAGS_model_name), o.model_path);
    if (!served_name.ok()) return served_name.status();
    o.model_name = *std::move(served_name);
    if (!absl::GetFlag(FLAGS_model_name).empty()) {
      std::fprintf(stderr, "tandem-decode: --model_name is deprecated; use --served_model_name\n");
    }
    o.advertised_address = advertise;
    o.instance = *instance;
    o.decode.max_batch = absl::GetFlag(FLAGS_max_batch);
    o.queue_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_queue_timeout_ms));
    o.rpc_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_rpc_timeout_ms));
    o.stall_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_stall_timeout_ms));
    absl::StatusOr<tandem::NodeKvTransport> kv =
        tandem::ResolveNodeKvTransport("tandem-decode", tandem::UcxOptionsFromFlags(),
                                       absl::GetFlag(FLAGS_kv_gpu_direct), &o.instance);
    if (!kv.ok()) return kv.status();
    o.pullers = tandem::UcxPullerFactory(kv->ucx, kv->device_pools);
    o.prefill = std::make_shared<tandem::GrpcPrefillClient>(tandem::GrpcChannelCredentials(*tls));
    o.colocated_prefill = absl::GetFlag(FLAGS_colocated_prefill);
    o.colocated.max_prefill_tokens = absl::GetFlag(FLAGS_max_prefill_tokens);
    o.colocated.queue_timeout = o.queue_timeout;
    std::fprintf(stderr, "tandem-decode: loading %s (%s) on %s\n", o.model_path.c_str(),
                 o.instance.parallel.ToString().c_str(), advertise.c_str());
    absl::StatusOr<std::unique_ptr<tandem::DecodeNode>> created = tandem::DecodeNode::Create(o);
    if (!created.ok()) return created.status();
    node = std::move(created).value();
    tandem::DecodeNode* n = node.get();
    if (absl::Status s = tandem::RegisterNodeLoadGauges(
            metrics, {.running = [n] { return double(n->running()); },
                      .waiting = [n] { return double(n->queued()); },
                      .blocks_used = [n] { return double(n->total_blocks() - n->free_blocks()); },
                      .blocks_free = [n] { return double(n->free_blocks()); }});
        !s.ok()) {
      return s;
    }
    // Provable KV (docs/kv_transfer.md): transfers whose KV failed / passed its digests.
    if (absl::Status s = metrics.AddCallbackCounter(
            "tandem_kv_digest_mismatches_total",
            "KV transfers whose pulled KV failed its digests (discarded; the router prefills "
            "again elsewhere)",
            [n] { return double(n->kv_digest_mismatches()); });
        !s.ok()) {
      return s;
    }
    if (absl::Status s = metrics.AddCallbackCounter(
            "tandem_kv_digests_verified_total",
            "KV transfers whose every pulled byte matched the prefill's digests",
            [n] { return double(n->kv_digests_verified()); });
        !s.ok()) {
      return s;
    }
    // What the digests cost (bench/serve/kv_digest_ttft.sh: their share of TTFT).
    if (absl::Status s = metrics.AddCallbackCounter(
            "tandem_kv_digest_check_seconds_total",
            "Time spent checking the KV digests of transfers that had them (overlapped with the "
            "pull or not)",
            [n] { return absl::ToDoubleSeconds(n->kv_digest_check_time()); });
        !s.ok()) {
      return s;
    }
    // n > 1 from one prefill (docs/router.md#n-choices-from-one-prefill): what the choices'
    // shared prompt blocks save shows here.
    if (absl::Status s = metrics.AddCallbackCounter(
            "tandem_kv_decode_blocks_allocated_total",
            "KV blocks taken for Decode calls with a KV handle (the choices of an n > 1 call share "
            "their prompt's full blocks)",
            [n] { return double(n->blocks_allocated()); });
        !s.ok()) {
      return s;
    }
    service.SetNode(node.get());
    return absl::StrCat("serving ", node->model_name(), " on ", advertise, " (",
                        node->total_blocks(), " blocks per rank",
                        node->colocated_prefill() ? ", colocated prefill" : "", ")");
  };
  process.start_drain = [&] { service.drain_gate().StartDrain(); };
  // Decode streams in flight run to their end (the KV they pull is released as usual).
  process.wait_drained = [&](absl::Time deadline) {
    return service.drain_gate().WaitIdle(deadline);
  };
  process.stop = [&] {
    service.SetNode(nullptr);
    node.reset();
  };
  return tandem::RunNodeProcess(process);
}
