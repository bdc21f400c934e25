#include "serving/instance_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, model, "", "GGUF model file or HF checkpoint directory");
ABSL_FLAG(std::string, served_model_name, "",
          "name the model is served as, reported to the router, which must serve the same name "
          "(default: the model file's name without .gguf, or the HF directory's name; spaces "
          "become '-')");
ABSL_FLAG(std::string, model_name, "", "deprecated alias of --served_model_name");
ABSL_FLAG(std::string, listen, "127.0.0.1:0", "gRPC listen address host:port (0 = any port)");
ABSL_FLAG(std::string, advertise, "", "address to advertise (default: listen host + bound port)");
ABSL_FLAG(std::string, port_file, "", "write the bound port to this file once serving");
ABSL_FLAG(std::string, router, "", "router address to send heartbeats to (optional)");
ABSL_FLAG(std::string, ucx_tls, "", "UCX_TLS for KV transfer, e.g. sm,self or tcp");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:0",
          "HTTP address serving Prometheus /metrics, IP:PORT (port 0 = any); empty disables");
ABSL_FLAG(std::string, metrics_port_file, "", "write the /metrics port to this file once bound");
ABSL_FLAG(int32_t, drain_timeout_s, 30,
          "on SIGTERM: seconds in-flight calls and handed-out KV leases may take before exit");
ABSL_FLAG(int32_t, max_queued_requests, 1024,
          "Prefill/Decode calls that may wait (admitted, not yet running in the engine) before "
          "new ones are refused with RESOURCE_EXHAUSTED; 0 = no limit");
ABSL_FLAG(int32_t, max_concurrent_streams, 4096,
          "gRPC calls one client connection may have open at once (more wait in the client); "
          "the router multiplexes all its calls to a node on one connection; 0 = gRPC default");
ABSL_FLAG(int32_t, tp, 1, "tensor parallel degree");
ABSL_FLAG(int32_t, pcp, 1, "prefill context parallel degree (prefill instances only)");
ABSL_FLAG(int32_t, dcp, 1, "decode context parallel degree (KV token sharding)");
ABSL_FLAG(int32_t, block_size, 16, "KV block size in tokens per rank");
ABSL_FLAG(int32_t, interleave, 1, "DCP interleave (tokens per rank before moving on)");
ABSL_FLAG(double, kv_budget_mb, 256, "KV pool size of each rank, MiB (fractions allowed)");
ABSL_FLAG(std::string, kv_dtype, "f32", "KV cache dtype: f32, f16 or bf16");
ABSL_FLAG(int32_t, threads_per_rank, 0, "CPU threads per rank (0 = cores / ranks)");
ABSL_FLAG(std::string, backend, "cpu", "compute backend: cpu or cuda");
ABSL_FLAG(std::string, kv_staging, "auto",
          "auto: KV pools in device memory transfer through host mirrors (GPU backends); "
          "always: use mirrors on the CPU backend too (exercises the GPU path's staging)");
ABSL_FLAG(bool, kv_gpu_direct, false,
          "GPU-direct KV: register device KV pools with a CUDA-aware UCX and pull device to "
          "device (needs a build with -DTANDEM_UCX_ROOT; without CUDA in UCX, host mirrors are "
          "the logged fallback). Needs --kv_digests=false and --prefix_cache=false on prefill "
          "nodes (both read KV on the host)");

namespace tandem {

absl::StatusOr<InstanceOptions> InstanceOptionsFromFlags() {
  InstanceOptions o;
  o.parallel =
      ParallelConfig{absl::GetFlag(FLAGS_tp), absl::GetFlag(FLAGS_pcp), absl::GetFlag(FLAGS_dcp),
                     absl::GetFlag(FLAGS_block_size), absl::GetFlag(FLAGS_interleave)};
  o.kv_bytes_per_rank = static_cast<int64_t>(absl::GetFlag(FLAGS_kv_budget_mb) * (1 << 20));
  const std::string dtype = absl::GetFlag(FLAGS_kv_dtype);
  if (dtype == "f32") {
    o.kv_dtype = KvDType::kF32;
  } else if (dtype == "f16") {
    o.kv_dtype = KvDType::kF16;
  } else if (dtype == "bf16") {
    o.kv_dtype = KvDType::kBF16;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_dtype must be f32, f16 or bf16 (got '", dtype, "')"));
  }
  o.threads_per_rank = absl::GetFlag(FLAGS_threads_per_rank);
  o.backend = absl::GetFlag(FLAGS_backend);
  const std::string staging = absl::GetFlag(FLAGS_kv_staging);
  if (staging == "auto") {
    o.kv_staging = KvStaging::kAuto;
  } else if (staging == "always") {
    o.kv_staging = KvStaging::kAlways;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_staging must be auto or always (got '", staging, "')"));
  }
  return o;
}

UcxOptions UcxOptionsFromFlags() {
  UcxOptions u;
  const std::string tls = absl::GetFlag(FLAGS_ucx_tls);
  if (!tls.empty()) u.config.emplace_back("TLS", tls);
  return u;
}

}  // namespace tandem
