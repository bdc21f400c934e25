// In-process fake serving endpoints with known latencies, for tandem-bench tests:
//   FakeRouter      a real gRPC server of tandem.v1.Router (Generate only) on 127.0.0.1:0
//   FakeOpenAi      a minimal HTTP/1.1 server on 127.0.0.1:0 speaking the OpenAI streaming API
//                   (/v1/completions, /v1/chat/completions; one request per connection)
// Both follow one latency plan keyed by the prompt (PlanFor): a request whose prompt has L
// tokens (or L chat messages) fails at once when L == kFailingLength, else streams its
// max_tokens tokens with the first after L × kTtftPerUnit and the rest kItl apart. The sleeps are
// the fakes' simulated compute, not test synchronisation.
//
// Thread-safety: all accessors are thread-safe. Destructors stop the servers and join threads.
#pragma once

#include <grpcpp/server.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace tandem::bench::testing {

inline constexpr int kFailingLength = 5;
inline constexpr absl::Duration kTtftPerUnit = absl::Milliseconds(30);
inline constexpr absl::Duration kItl = absl::Milliseconds(6);

struct Plan {
  bool fail = false;
  absl::Duration ttft;
};
Plan PlanFor(int64_t prompt_units);

// Tracks how many requests are in flight at once.
class InFlight {
 public:
  void Enter();
  void Leave();
  int max() const;

 private:
  mutable absl::Mutex mu_;
  int now_ ABSL_GUARDED_BY(mu_) = 0;
  int max_ ABSL_GUARDED_BY(mu_) = 0;
};

class FakeRouter {
 public:
  FakeRouter();
  ~FakeRouter();
  const std::string& address() const { return address_; }
  int max_in_flight() const { return in_flight_.max(); }

 private:
  class Service;
  InFlight in_flight_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

class FakeOpenAi {
 public:
  FakeOpenAi();
  ~FakeOpenAi();
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Bodies of every request received, in arrival order.
  std::vector<nlohmann::json> bodies() const;
  int max_in_flight() const { return in_flight_.max(); }

 private:
  void AcceptLoop();
  void Serve(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  InFlight in_flight_;
  std::thread accept_thread_;
  mutable absl::Mutex mu_;
  std::vector<std::thread> connections_ ABSL_GUARDED_BY(mu_);
  std::vector<nlohmann::json> bodies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::bench::testing
