#include "serving/node_process.h"

#include <grpcpp/health_check_service_interface.h>

#include <cstdio>
#include <memory>

#include "absl/flags/flag.h"
#include "serving/heartbeat.h"
#include "serving/instance_flags.h"
#include "serving/server_runner.h"

namespace tandem {

int RunNodeProcess(const NodeProcess& p) {
  auto fail = [&](const absl::Status& s) {
    std::fprintf(stderr, "%s: %s\n", p.program.c_str(), s.ToString().c_str());
    return 1;
  };
  absl::StatusOr<RunningServer> server = StartGrpcServer(absl::GetFlag(FLAGS_listen), {p.service});
  if (!server.ok()) return fail(server.status());
  grpc::HealthCheckServiceInterface* health = server->server->GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(false);
  const std::string advertise = absl::GetFlag(FLAGS_advertise).empty()
                                    ? WithPort(absl::GetFlag(FLAGS_listen), server->port)
                                    : absl::GetFlag(FLAGS_advertise);
  absl::StatusOr<std::string> serving = p.start(advertise);
  if (!serving.ok()) return fail(serving.status());
  if (health != nullptr) health->SetServingStatus(true);
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    if (absl::Status s = WritePortFile(absl::GetFlag(FLAGS_port_file), server->port); !s.ok()) {
      return fail(s);
    }
  }
  std::unique_ptr<HeartbeatSender> heartbeat;
  if (!absl::GetFlag(FLAGS_router).empty()) {
    heartbeat = std::make_unique<HeartbeatSender>(absl::GetFlag(FLAGS_router), advertise, p.role,
                                                  absl::Seconds(3));
  }
  std::fprintf(stderr, "%s: %s\n", p.program.c_str(), serving->c_str());
  const int sig = WaitForShutdownSignal();
  std::fprintf(stderr, "%s: signal %d, shutting down\n", p.program.c_str(), sig);
  heartbeat.reset();
  if (health != nullptr) health->SetServingStatus(false);
  server->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->server->Wait();
  p.stop();
  return 0;
}

}  // namespace tandem
