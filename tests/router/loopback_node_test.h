// A test fixture with one node on loopback gRPC: `service_` (a callback service the test defines)
// served at `address_`, `node_` naming it for a NodeClient, and the GrpcNodeClient `client_` to
// call it with. The server stops (open calls cancelled after 2 s) when the test ends.
#pragma once

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "router/grpc_node_client.h"
#include "serving/loopback_server.h"

namespace tandem {

template <typename Service>
class LoopbackNodeTest : public testing::Test {
 protected:
  LoopbackNodeTest() {
    server_ = StartLoopbackServer(&service_, &address_);
    node_ = NodeRef{address_, grpc::CreateChannel(address_, grpc::InsecureChannelCredentials())};
  }
  ~LoopbackNodeTest() override { StopLoopbackServer(server_.get(), absl::Seconds(2)); }

  Service service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  NodeRef node_;
  GrpcNodeClient client_;
};

}  // namespace tandem
