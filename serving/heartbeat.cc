#include "serving/heartbeat.h"

#include <grpcpp/grpcpp.h>

#include <cstdio>

#include "tandem/v1/router.grpc.pb.h"

namespace tandem {

HeartbeatSender::HeartbeatSender(std::string router, std::string address, v1::InstanceRole role,
                                 absl::Duration ttl,
                                 std::shared_ptr<grpc::ChannelCredentials> credentials)
    : router_(std::move(router)),
      address_(std::move(address)),
      role_(role),
      ttl_(ttl),
      credentials_(credentials != nullptr ? std::move(credentials)
                                          : grpc::InsecureChannelCredentials()) {
  thread_ = std::thread([this] { Loop(); });
}

HeartbeatSender::~HeartbeatSender() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void HeartbeatSender::Loop() {
  auto stub = v1::Router::NewStub(grpc::CreateChannel(router_, credentials_));
  bool last_ok = true;
  while (true) {
    v1::HeartbeatRequest req;
    req.set_address(address_);
    req.set_role(role_);
    req.set_ttl_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(ttl_)));
    v1::HeartbeatResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + ttl_ / 3));
    const grpc::Status s = stub->Heartbeat(&ctx, req, &resp);
    if (s.ok() != last_ok) {
      std::fprintf(stderr, "heartbeat to %s: %s\n", router_.c_str(),
                   s.ok() ? "registered" : s.error_message().c_str());
      last_ok = s.ok();
    }
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), ttl_ / 3)) return;
  }
}

}  // namespace tandem
