// Channels of Tandem's own clients (the `tandem` CLI, tandem-bench, tests) to a router or a node:
// TLS or plaintext credentials (serving/tls_credentials.h) and, optionally, the router's API key
// sent with every call as metadata `authorization: Bearer KEY` (docs/security.md). The key goes
// through a client interceptor rather than call credentials because gRPC sends call credentials
// only over TLS, and a plaintext router with keys (tests, a trusted network) must work too.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

namespace tandem {

// `credentials` nullptr: insecure. `api_key` empty: no authorization metadata.
std::shared_ptr<grpc::Channel> CreateClientChannel(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
    const std::string& api_key, const grpc::ChannelArguments& args = grpc::ChannelArguments());

}  // namespace tandem
