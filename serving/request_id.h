// The router's request id on the wire: the router adds it to every call it makes for a request
// as gRPC metadata `x-request-id` (the same header name the HTTP API returns), and nodes put it
// in their per-request log lines, so one grep finds a request in every process's log.
//
// Header-only and thread-compatible (each function touches only the context it is given).
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>

#include <string>

namespace tandem {

inline constexpr char kRequestIdMetadataKey[] = "x-request-id";

// REQUIRES: the call has not started. An empty id adds nothing.
inline void SetRequestIdMetadata(grpc::ClientContext* ctx, const std::string& request_id) {
  if (!request_id.empty()) ctx->AddMetadata(kRequestIdMetadataKey, request_id);
}

// The caller's x-request-id, or `fallback` when the call carries none (a client other than the
// router, e.g. a test calling the node directly).
inline std::string RequestIdFromMetadata(const grpc::ServerContextBase& ctx,
                                         const std::string& fallback) {
  const auto& md = ctx.client_metadata();
  const auto it = md.find(kRequestIdMetadataKey);
  if (it == md.end() || it->second.empty()) return fallback;
  return std::string(it->second.data(), it->second.size());
}

}  // namespace tandem
