// The clients of the router capacity bench: N concurrent Generate streams over gRPC (callback
// reactors on a few channels) or over HTTP/SSE (/v1/completions with stream=true, libcurl's multi
// socket interface on epoll), and, as the bench's own floor, the same node calls with no router
// between. Each records when every token arrived, by client request id, so the bench can pair it
// with the fake node's emission time (timed_nodes.h).
//
// Streams start spread over `spread` (not all in one instant) and each asks for `tokens` tokens.
// Every wait is bounded by `timeout`: a stream not done by then counts as failed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tandem::bench {

struct StreamResult {
  std::string client_id;                // the request id the client sent
  std::vector<absl::Time> token_times;  // arrival of each token, index order
  bool ok = false;
  std::string error;
};

struct LoadSpec {
  std::string target;          // gRPC host:port, or the HTTP base URL http://host:port
  std::string prefill_target;  // RunDirectStreams: the prefill node (target: the decode node)
  std::string model;           // served model name (HTTP body)
  std::string id_prefix;
  int streams = 0;
  int tokens = 0;
  absl::Duration spread;
  absl::Duration timeout;
};

std::vector<StreamResult> RunGrpcStreams(const LoadSpec& spec);
std::vector<StreamResult> RunHttpStreams(const LoadSpec& spec);
// No router: the client makes the router's node calls itself (the bench's own floor).
std::vector<StreamResult> RunDirectStreams(const LoadSpec& spec);

}  // namespace tandem::bench
