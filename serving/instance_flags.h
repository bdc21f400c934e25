// Command-line flags shared by tandem-prefill and tandem-decode (absl flags; any of them may also
// come from a config file through --flagfile=FILE, one "--name=value" per line).
//
//   --model PATH            GGUF file or HF checkpoint directory
//   --served_model_name NAME  served model name (default: the file's name without .gguf or the
//                           HF directory's name, serving/served_model_name.h); --model_name is
//                           its deprecated alias
//   --listen HOST:PORT      gRPC listen address (port 0 = any free port)
//   --advertise HOST:PORT   address other nodes should use (default: the listen host + bound port)
//   --port_file PATH        write the bound port here once serving
//   --tp --pcp --dcp        parallel layout (pcp must be 1 on decode instances)
//   --block_size --interleave
//   --kv_budget_mb MB       KV pool size of each rank
//   --kv_dtype f32|f16|bf16
//   --threads_per_rank N    0 = cores / ranks
//   --backend cpu|cuda
//   --kv_staging auto|always  host mirrors of device KV pools for the transfer (always: on CPU too)
//   --kv_gpu_direct         device KV pools registered with a CUDA-aware UCX, pulled device to
//                           device (off by default; serving/node_kv_transport.h)
//   --router HOST:PORT      send heartbeats to this router (optional)
//   --ucx_tls LIST          UCX_TLS for the KV transfer (e.g. "sm,self" or "tcp"); empty = UCX
//   default
//   --metrics_listen IP:PORT  HTTP address of GET /metrics (Prometheus text); empty disables
//   --metrics_port_file PATH  write the bound /metrics port here
//   --drain_timeout_s S     on SIGTERM, how long in-flight work and handed-out KV may take
//   --max_queued_requests N  calls waiting beyond this are refused (RESOURCE_EXHAUSTED)
//   --max_concurrent_streams N  gRPC streams per client connection
//   (TLS: --tls_cert, --tls_key, --tls_ca in serving/tls_flags.h)
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "engine/instance.h"
#include "kv_transfer/ucx/ucx_worker.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, served_model_name);
ABSL_DECLARE_FLAG(std::string, model_name);
ABSL_DECLARE_FLAG(std::string, listen);
ABSL_DECLARE_FLAG(std::string, advertise);
ABSL_DECLARE_FLAG(std::string, port_file);
ABSL_DECLARE_FLAG(std::string, router);
ABSL_DECLARE_FLAG(std::string, ucx_tls);
ABSL_DECLARE_FLAG(bool, kv_gpu_direct);
ABSL_DECLARE_FLAG(std::string, metrics_listen);
ABSL_DECLARE_FLAG(std::string, metrics_port_file);
ABSL_DECLARE_FLAG(int32_t, drain_timeout_s);
ABSL_DECLARE_FLAG(int32_t, max_queued_requests);
ABSL_DECLARE_FLAG(int32_t, max_concurrent_streams);

namespace tandem {

// InstanceOptions from the layout/KV/backend flags. INVALID_ARGUMENT for a bad kv_dtype or
// kv_staging.
absl::StatusOr<InstanceOptions> InstanceOptionsFromFlags();
UcxOptions UcxOptionsFromFlags();

}  // namespace tandem
