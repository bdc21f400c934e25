// In-process fake prefill and decode nodes for router tests, each a real gRPC server on its own
// 127.0.0.1 port (callback API, so a fake can hold a stream open until the router cancels it
// without sleeping).
//
// Both follow the token protocol exactly, with generated token g(step) = TokenForStep(step):
// Prefill samples g(sample_step) (unless told otherwise) and returns a KvHandle; Decode emits
// g(next_step), g(next_step + 1), ... until max_new_tokens tokens counting first_token, then a
// finish event. So a request of max_tokens N must reach the client as g(0..N) whatever failures
// and resumes happened in between.
//
// Failures come from scripts shared by several fakes, so a test can say "the first Decode call,
// on whichever node the router picks, dies after 2 tokens".
//
// Thread-safety: all accessors are thread-safe.
#pragma once

#include <grpcpp/server.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem::testing_router {

// g(step): lowercase letters, one byte token each.
int32_t TokenForStep(uint64_t step);

// What the next Prefill call (any fake sharing the script) does.
struct PrefillScript {
  absl::Mutex mu;
  std::deque<grpc::Status> failures ABSL_GUARDED_BY(mu);   // popped one per call while non-empty
  std::optional<int32_t> first_token ABSL_GUARDED_BY(mu);  // overrides g(sample_step)
  int64_t cached_tokens ABSL_GUARDED_BY(mu) = 0;  // PrefillResponse.cached_tokens of every call
};

// The layouts the fakes report (a handle's layout, a decode call's DecodeServed) and the KV bytes
// a fake decode call says it pulled, with its digests verified.
inline constexpr int32_t kFakePrefillTp = 2;
inline constexpr int32_t kFakeDecodeTp = 1;
inline constexpr int32_t kFakeBlockSize = 16;
inline constexpr int64_t kFakeKvBytes = 4096;

struct DecodeBehaviour {
  int die_after = -1;  // after this many tokens, end the stream with UNAVAILABLE
  std::string die_message = "fake decode node died";  // that status' message
  // The UNAVAILABLE carries a KvSourceFailure naming the request's prefill node (by the KV
  // handle's prefill_address), as a real decode node's does when its pull from that node fails.
  bool blame_source = false;
  int hang_after = -1;  // after this many tokens, send nothing until cancelled
  v1::FinishReason finish = v1::FINISH_REASON_LENGTH;  // the finish event's reason
};

struct DecodeScript {
  absl::Mutex mu;
  std::deque<DecodeBehaviour> calls ABSL_GUARDED_BY(mu);  // popped one per call; then normal
};

class FakePrefill final : public v1::PrefillService::CallbackService {
 public:
  FakePrefill(std::string name, std::shared_ptr<PrefillScript> script);
  ~FakePrefill() override;

  const std::string& address() const { return address_; }
  std::vector<v1::PrefillRequest> prefills() const;
  std::vector<v1::ReleaseKvRequest> releases() const;
  std::vector<v1::KvHandle> handles() const;  // every handle returned, in order
  // The x-request-id metadata of each Prefill call, in order ("" when absent).
  std::vector<std::string> prefill_request_ids() const;
  // Waits up to `timeout` until at least `n` ReleaseKv calls arrived.
  bool WaitForReleases(size_t n, absl::Duration timeout) const;

  // Publishes a prefix-cache digest (InstanceStatus.prefix_cache) with this salt and block size;
  // from now on every successful Prefill caches its prompt's full blocks, as a real prefill
  // instance with a prefix cache does (most recently used first, never evicted).
  void EnablePrefixCache(uint64_t salt, int64_t block_tokens);
  // Adds the full blocks of `tokens` to the digest as if a prefill had cached them.
  void CachePrefix(absl::Span<const int32_t> tokens);
  // Blocks the digest lists.
  size_t cached_blocks() const;
  // The InstanceLoad.pending_prompt_tokens its Status reports (default 0).
  void SetPendingPromptTokens(int64_t tokens);

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
  void CachePrefixLocked(absl::Span<const int32_t> tokens) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const std::shared_ptr<PrefillScript> script_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  mutable absl::Mutex mu_;
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<v1::PrefillRequest> prefills_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::KvHandle> handles_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReleaseKvRequest> releases_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> prefill_request_ids_ ABSL_GUARDED_BY(mu_);
  std::optional<v1::PrefixCacheDigest> digest_ ABSL_GUARDED_BY(mu_);
  int64_t pending_prompt_tokens_ ABSL_GUARDED_BY(mu_) = 0;
};

class FakeDecode final : public v1::DecodeService::CallbackService {
 public:
  FakeDecode(std::string name, std::shared_ptr<DecodeScript> script);
  ~FakeDecode() override;

  const std::string& address() const { return address_; }
  std::vector<v1::DecodeRequest> requests() const;
  // The x-request-id metadata of each Decode call, in order ("" when absent).
  std::vector<std::string> request_ids() const;
  int cancelled() const;
  // Waits up to `timeout` until at least `n` calls saw a cancellation.
  bool WaitForCancelled(int n, absl::Duration timeout) const;

  grpc::ServerWriteReactor<v1::DecodeEvent>* Decode(grpc::CallbackServerContext* ctx,
                                                    const v1::DecodeRequest* request) override;
  grpc::ServerUnaryReactor* Status(grpc::CallbackServerContext* ctx,
                                   const v1::StatusRequest* request,
                                   v1::InstanceStatus* response) override;

 private:
  class Stream;
  void NoteCancelled();

  const std::string name_;
  const std::shared_ptr<DecodeScript> script_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  mutable absl::Mutex mu_;
  std::vector<v1::DecodeRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> request_ids_ ABSL_GUARDED_BY(mu_);
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::testing_router
