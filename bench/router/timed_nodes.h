// Fake prefill and decode nodes for the router capacity bench (router_capacity_bench.cc): real
// gRPC servers on 127.0.0.1 in the bench process that emit tokens at a fixed rate, so the bench
// measures the router, not a model.
//
// Prefill answers at once with first token `*token` and a KvHandle; Decode emits the remaining
// max_new_tokens - 1 tokens, one every `period` after the call arrives (grpc::Alarm, no thread per
// stream), then a finish event. Every token's emission time (before its write starts; the first
// token's when Prefill answers) is recorded in the EmitLog under the client's request id (the
// node request id up to its '#', router/generate_driver.cc), so the bench can subtract it from
// the time the client received that token.
//
// Thread-safety: all methods are thread-safe.
#pragma once

#include <grpcpp/server.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem::bench {

// Emission times of each request's tokens, by client request id, index 0 = the first token.
class EmitLog {
 public:
  void Record(const std::string& node_request_id, int32_t index, absl::Time at);
  // The times recorded for `client_id` (moved out: each request is read once).
  std::vector<absl::Time> Take(const std::string& client_id);

 private:
  absl::Mutex mu_;
  std::unordered_map<std::string, std::vector<absl::Time>> times_ ABSL_GUARDED_BY(mu_);
};

class TimedPrefill final : public v1::PrefillService::CallbackService {
 public:
  // `model`: the served model name the router expects in Status.
  // `token`: the id every node emits, read at each use (the bench learns it from the router).
  TimedPrefill(std::string model, const std::atomic<int32_t>* token, EmitLog* log);
  ~TimedPrefill() override;
  const std::string& address() const { return address_; }

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* ctx,
                                    const v1::PrefillRequest* request,
                                    v1::PrefillResponse* response) override;
  grpc::ServerUnaryReactor* ReleaseKv(grpc::CallbackServerContext* ctx,
                                      const v1::ReleaseKvRequest* request,
                                      v1::ReleaseKvResponse* response) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const v1::StatusRequest* request,
                                   v1::InstanceStatus* response) override;

 private:
  const std::string model_;
  const std::atomic<int32_t>* const token_;
  EmitLog* const log_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

class TimedDecode final : public v1::DecodeService::CallbackService {
 public:
  TimedDecode(std::string model, const std::atomic<int32_t>* token, absl::Duration period,
              EmitLog* log);
  ~TimedDecode() override;
  const std::string& address() const { return address_; }

  grpc::ServerWriteReactor<v1::DecodeEvent>* Decode(grpc::CallbackServerContext* ctx,
                                                    const v1::DecodeRequest* request) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const v1::StatusRequest* request,
                                   v1::InstanceStatus* response) override;

 private:
  class Stream;
  const std::string model_;
  const std::atomic<int32_t>* const token_;
  const absl::Duration period_;
  EmitLog* const log_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

}  // namespace tandem::bench
