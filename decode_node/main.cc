// tandem-decode: parses flags, wires a DecodeNode to its gRPC service, serves until SIGTERM.
#include <grpcpp/health_check_service_interface.h>

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/flag_dashes.h"
#include "decode_node/decode_node.h"
#include "decode_node/decode_service.h"
#include "serving/heartbeat.h"
#include "serving/instance_flags.h"
#include "serving/server_runner.h"

ABSL_FLAG(int32_t, max_batch, 64, "requests decoded together per step (more wait in a queue)");
ABSL_FLAG(int32_t, queue_timeout_ms, 30000, "how long a request may wait for KV capacity");
ABSL_FLAG(int32_t, rpc_timeout_ms, 10000, "deadline of calls to prefill instances");
ABSL_FLAG(int32_t, stall_timeout_ms, 10000, "KV pull without progress for this long fails");

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "tandem-decode: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Tandem decode instance. See docs/configuration.md.");
  tandem::NormalizeFlagDashes(argc, argv);
  absl::ParseCommandLine(argc, argv);
  tandem::InstallShutdownSignals();
  absl::StatusOr<tandem::InstanceOptions> instance = tandem::InstanceOptionsFromFlags();
  if (!instance.ok()) return Fail(instance.status());

  tandem::DecodeServiceImpl service;
  absl::StatusOr<tandem::RunningServer> server =
      tandem::StartGrpcServer(absl::GetFlag(FLAGS_listen), {&service});
  if (!server.ok()) return Fail(server.status());
  // The standard health service says NOT_SERVING until the model is loaded and the node wired.
  grpc::HealthCheckServiceInterface* health = server->server->GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(false);
  const std::string advertise = absl::GetFlag(FLAGS_advertise).empty()
                                    ? tandem::WithPort(absl::GetFlag(FLAGS_listen), server->port)
                                    : absl::GetFlag(FLAGS_advertise);
  tandem::DecodeNodeOptions o;
  o.model_path = absl::GetFlag(FLAGS_model);
  o.model_name = absl::GetFlag(FLAGS_model_name);
  o.advertised_address = advertise;
  o.instance = *instance;
  o.decode.max_batch = absl::GetFlag(FLAGS_max_batch);
  o.queue_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_queue_timeout_ms));
  o.rpc_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_rpc_timeout_ms));
  o.stall_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_stall_timeout_ms));
  o.ucx = tandem::UcxOptionsFromFlags();
  std::fprintf(stderr, "tandem-decode: loading %s (%s) on %s\n", o.model_path.c_str(),
               o.instance.parallel.ToString().c_str(), advertise.c_str());
  absl::StatusOr<std::unique_ptr<tandem::DecodeNode>> node = tandem::DecodeNode::Create(o);
  if (!node.ok()) return Fail(node.status());
  service.SetNode(node->get());
  if (health != nullptr) health->SetServingStatus(true);
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    if (absl::Status s = tandem::WritePortFile(absl::GetFlag(FLAGS_port_file), server->port);
        !s.ok()) {
      return Fail(s);
    }
  }
  std::unique_ptr<tandem::HeartbeatSender> heartbeat;
  if (!absl::GetFlag(FLAGS_router).empty()) {
    heartbeat = std::make_unique<tandem::HeartbeatSender>(
        absl::GetFlag(FLAGS_router), advertise, tandem::v1::INSTANCE_ROLE_DECODE, absl::Seconds(3));
  }
  std::fprintf(stderr, "tandem-decode: serving %s on %s (%d blocks per rank)\n",
               (*node)->model_name().c_str(), advertise.c_str(), (*node)->total_blocks());
  const int sig = tandem::WaitForShutdownSignal();
  std::fprintf(stderr, "tandem-decode: signal %d, shutting down\n", sig);
  heartbeat.reset();
  if (health != nullptr) health->SetServingStatus(false);
  server->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->server->Wait();
  service.SetNode(nullptr);
  node->reset();
  return 0;
}
