// tandem-prefill: parses flags, wires a PrefillNode to its gRPC service, serves until SIGTERM.
#include <grpcpp/health_check_service_interface.h>

#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "common/flag_dashes.h"
#include "prefill_node/prefill_node.h"
#include "prefill_node/prefill_service.h"
#include "serving/heartbeat.h"
#include "serving/instance_flags.h"
#include "serving/server_runner.h"

ABSL_FLAG(int32_t, max_prefill_tokens, 2048, "tokens per prefill step (longer prompts are chunked)");
ABSL_FLAG(int32_t, queue_timeout_ms, 30000, "how long a prompt may wait for KV capacity");
ABSL_FLAG(int32_t, lease_ms, 30000, "default KV lease after a prefill");
ABSL_FLAG(std::string, engine_id, "", "engine id in KV handles (default: prefill-<address>)");

namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "tandem-prefill: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Tandem prefill instance. See docs/configuration.md.");
  tandem::NormalizeFlagDashes(argc, argv);
  absl::ParseCommandLine(argc, argv);
  tandem::InstallShutdownSignals();
  absl::StatusOr<tandem::InstanceOptions> instance = tandem::InstanceOptionsFromFlags();
  if (!instance.ok()) return Fail(instance.status());

  tandem::PrefillServiceImpl service;
  absl::StatusOr<tandem::RunningServer> server =
      tandem::StartGrpcServer(absl::GetFlag(FLAGS_listen), {&service});
  if (!server.ok()) return Fail(server.status());
  // The standard health service says NOT_SERVING until the model is loaded and the node wired.
  grpc::HealthCheckServiceInterface* health = server->server->GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(false);
  const std::string advertise = absl::GetFlag(FLAGS_advertise).empty()
                                    ? tandem::WithPort(absl::GetFlag(FLAGS_listen), server->port)
                                    : absl::GetFlag(FLAGS_advertise);

  tandem::PrefillNodeOptions o;
  o.model_path = absl::GetFlag(FLAGS_model);
  o.model_name = absl::GetFlag(FLAGS_model_name);
  o.engine_id = absl::GetFlag(FLAGS_engine_id);
  o.advertised_address = advertise;
  o.instance = *instance;
  o.prefill.max_prefill_tokens = absl::GetFlag(FLAGS_max_prefill_tokens);
  o.prefill.queue_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_queue_timeout_ms));
  o.default_lease = absl::Milliseconds(absl::GetFlag(FLAGS_lease_ms));
  o.ucx = tandem::UcxOptionsFromFlags();
  std::fprintf(stderr, "tandem-prefill: loading %s (%s) on %s\n", o.model_path.c_str(),
               o.instance.parallel.ToString().c_str(), advertise.c_str());
  absl::StatusOr<std::unique_ptr<tandem::PrefillNode>> node = tandem::PrefillNode::Create(o);
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
        absl::GetFlag(FLAGS_router), advertise, tandem::v1::INSTANCE_ROLE_PREFILL, absl::Seconds(3));
  }
  std::fprintf(stderr, "tandem-prefill: serving %s on %s (engine %s, %d blocks per rank)\n",
               (*node)->model_name().c_str(), advertise.c_str(), (*node)->engine_id().c_str(),
               (*node)->Load().total_blocks);
  const int sig = tandem::WaitForShutdownSignal();
  std::fprintf(stderr, "tandem-prefill: signal %d, shutting down\n", sig);
  heartbeat.reset();
  if (health != nullptr) health->SetServingStatus(false);
  server->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->server->Wait();
  service.SetNode(nullptr);
  node->reset();
  return 0;
}
