#include "serving/loopback_server.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tandem {

std::unique_ptr<grpc::Server> StartLoopbackServer(grpc::Service* service, std::string* address) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server != nullptr && port != 0) *address = absl::StrCat("127.0.0.1:", port);
  return server;
}

void StopLoopbackServer(grpc::Server* server, absl::Duration grace) {
  if (server != nullptr) server->Shutdown(absl::ToChronoTime(absl::Now() + grace));
}

}  // namespace tandem
