#include "serving/server_runner.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace tandem {

absl::Status ConfigureGrpcServer(grpc::ServerBuilder& builder, const std::string& listen,
                                 const GrpcServerSettings& settings, int* port) {
  if (settings.max_concurrent_streams < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_concurrent_streams must be >= 0 (0 = no limit), got ",
                     settings.max_concurrent_streams));
  }
  builder.AddListeningPort(
      listen,
      settings.credentials != nullptr ? settings.credentials : grpc::InsecureServerCredentials(),
      port);
  if (settings.max_concurrent_streams > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, settings.max_concurrent_streams);
  }
  // The router pings its node connections every 2 s to find connections a network cut left
  // dead (router/node_pool.h); gRPC's default would answer such pings with GOAWAY.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  return absl::OkStatus();
}

absl::StatusOr<RunningServer> StartGrpcServer(const std::string& listen,
                                              const std::vector<grpc::Service*>& services,
                                              const GrpcServerSettings& settings) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  RunningServer out;
  if (absl::Status s = ConfigureGrpcServer(builder, listen, settings, &out.port); !s.ok()) {
    return s;
  }
  for (grpc::Service* s : services) builder.RegisterService(s);
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || out.port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (address in use or invalid?)"));
  }
  return out;
}

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << port << "\n";
    if (!f) return absl::InternalError(absl::StrCat("cannot write port file ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

namespace {
sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void InstallShutdownSignals() {
  const sigset_t set = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int WaitForShutdownSignal() {
  const sigset_t set = ShutdownSignals();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

std::string WithPort(const std::string& listen, int port) {
  const size_t colon = listen.rfind(':');
  return absl::StrCat(colon == std::string::npos ? listen : listen.substr(0, colon), ":", port);
}

}  // namespace tandem
