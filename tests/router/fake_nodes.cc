#include "tests/router/fake_nodes.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/server_context.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kv_source_failure.h"
#include "common/prefix_hash.h"
#include "serving/grpc_status.h"
#include "serving/loopback_server.h"
#include "serving/request_id.h"
#include "tests/router/test_model.h"

namespace tandem::testing_router {
namespace {

v1::InstanceStatus FakeStatus(v1::InstanceRole role, const std::string& name,
                              const std::string& address) {
  v1::InstanceStatus status;
  status.set_engine_id(name);
  status.set_role(role);
  status.set_model(kTestModelName);
  status.set_address(address);
  status.set_epoch(1);
  status.mutable_load()->set_free_blocks(100);
  status.mutable_load()->set_total_blocks(128);
  return status;
}

}  // namespace

int32_t TokenForStep(uint64_t step) { return ByteToken(static_cast<char>('a' + step % 26)); }

FakePrefill::FakePrefill(std::string name, std::shared_ptr<PrefillScript> script)
    : name_(std::move(name)), script_(std::move(script)) {
  server_ = StartLoopbackServer(this, &address_);
}

FakePrefill::~FakePrefill() { StopLoopbackServer(server_.get(), absl::Seconds(2)); }

std::vector<v1::PrefillRequest> FakePrefill::prefills() const {
  absl::MutexLock lock(&mu_);
  return prefills_;
}

std::vector<v1::ReleaseKvRequest> FakePrefill::releases() const {
  absl::MutexLock lock(&mu_);
  return releases_;
}

std::vector<v1::KvHandle> FakePrefill::handles() const {
  absl::MutexLock lock(&mu_);
  return handles_;
}

std::vector<std::string> FakePrefill::prefill_request_ids() const {
  absl::MutexLock lock(&mu_);
  return prefill_request_ids_;
}

bool FakePrefill::WaitForReleases(size_t n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  const auto enough = [this, n]()
                          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return releases_.size() >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

void FakePrefill::EnablePrefixCache(uint64_t salt, int64_t block_tokens) {
  absl::MutexLock lock(&mu_);
  digest_.emplace();
  digest_->set_salt(salt);
  digest_->set_block_tokens(block_tokens);
}

void FakePrefill::CachePrefix(absl::Span<const int32_t> tokens) {
  absl::MutexLock lock(&mu_);
  CachePrefixLocked(tokens);
}

void FakePrefill::CachePrefixLocked(absl::Span<const int32_t> tokens) {
  if (!digest_.has_value()) return;
  const std::vector<uint64_t> chain =
      PrefixHashChain(digest_->salt(), tokens, digest_->block_tokens());
  // Most recently used first: the prompt's blocks move to the front, in prompt order.
  std::vector<uint64_t> blocks(chain.begin(), chain.end());
  for (const uint64_t h : digest_->block_hashes()) {
    if (std::find(chain.begin(), chain.end(), h) == chain.end()) blocks.push_back(h);
  }
  digest_->clear_block_hashes();
  digest_->mutable_block_hashes()->Add(blocks.begin(), blocks.end());
}

size_t FakePrefill::cached_blocks() const {
  absl::MutexLock lock(&mu_);
  return digest_.has_value() ? static_cast<size_t>(digest_->block_hashes_size()) : 0;
}

void FakePrefill::SetPendingPromptTokens(int64_t tokens) {
  absl::MutexLock lock(&mu_);
  pending_prompt_tokens_ = tokens;
}

grpc::ServerUnaryReactor* FakePrefill::Prefill(grpc::CallbackServerContext* ctx,
                                               const v1::PrefillRequest* request,
                                               v1::PrefillResponse* response) {
  std::optional<grpc::Status> failure;
  int32_t token = TokenForStep(request->sample_step());
  int64_t cached_tokens = 0;
  {
    absl::MutexLock lock(&script_->mu);
    if (!script_->failures.empty()) {
      failure = script_->failures.front();
      script_->failures.pop_front();
    }
    if (script_->first_token.has_value()) token = *script_->first_token;
    cached_tokens = script_->cached_tokens;
  }
  absl::MutexLock lock(&mu_);
  prefills_.push_back(*request);
  prefill_request_ids_.push_back(RequestIdFromMetadata(*ctx, ""));
  if (failure.has_value()) return FinishUnary(ctx, *failure);
  response->set_first_token(token);
  response->set_cached_tokens(cached_tokens);
  v1::KvHandle* kv = response->mutable_kv();
  kv->set_engine_id(name_);
  kv->set_epoch(7);
  kv->set_request_id(request->request_id());
  kv->set_num_tokens(request->prompt_ids_size());
  kv->set_generation(next_generation_++);
  kv->add_block_table(3);
  kv->set_prefill_address(address_);
  kv->mutable_layout()->mutable_parallel()->set_tp(kFakePrefillTp);
  kv->mutable_layout()->mutable_parallel()->set_block_size(kFakeBlockSize);
  handles_.push_back(*kv);
  CachePrefixLocked(request->prompt_ids());
  return FinishUnary(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* FakePrefill::ReleaseKv(grpc::CallbackServerContext* ctx,
                                                 const v1::ReleaseKvRequest* request,
                                                 v1::ReleaseKvResponse* response) {
  absl::MutexLock lock(&mu_);
  releases_.push_back(*request);
  response->set_lease_held(true);
  return FinishUnary(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* FakePrefill::Status(grpc::CallbackServerContext* ctx,
                                              const v1::StatusRequest*,
                                              v1::InstanceStatus* response) {
  *response = FakeStatus(v1::INSTANCE_ROLE_PREFILL, name_, address_);
  absl::MutexLock lock(&mu_);
  if (digest_.has_value()) *response->mutable_prefix_cache() = *digest_;
  response->mutable_load()->set_pending_prompt_tokens(pending_prompt_tokens_);
  return FinishUnary(ctx, grpc::Status::OK);
}

// One Decode call: writes the scripted events one at a time; a hanging stream finishes only
// when cancelled. Finish is decided under the lock and called outside it (it may run OnDone,
// which deletes the stream, inline).
class FakeDecode::Stream final : public grpc::ServerWriteReactor<v1::DecodeEvent> {
 public:
  Stream(FakeDecode* owner, const v1::DecodeRequest& request, DecodeBehaviour behaviour)
      : owner_(owner),
        request_(request),
        behaviour_(behaviour),
        to_emit_(request.max_new_tokens() - 1) {
    Advance();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
      return;
    }
    Advance();
  }

  void OnCancel() override {
    owner_->NoteCancelled();
    bool end = false;
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      end = hanging_;
    }
    if (end) End(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override { delete this; }

 private:
  void Advance() {
    if (written_ == behaviour_.hang_after) {
      bool end = false;
      {
        absl::MutexLock lock(&mu_);
        hanging_ = true;
        end = cancelled_;
      }
      if (end) End(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
      return;
    }
    if (written_ == behaviour_.die_after) {
      absl::Status died = absl::UnavailableError(behaviour_.die_message);
      if (behaviour_.blame_source) {
        died = BlameKvSource(std::move(died), {request_.kv().prefill_address(), "", {}});
      }
      End(ToGrpcStatus(died));
      return;
    }
    event_.Clear();
    if (written_ < to_emit_) {
      event_.set_token(TokenForStep(request_.next_step() + written_));
      ++written_;
      WriteEvent();
      return;
    }
    if (!finish_sent_) {
      finish_sent_ = true;
      event_.mutable_finish()->set_reason(behaviour_.finish);
      event_.mutable_finish()->set_generated(request_.max_new_tokens());
      WriteEvent();
      return;
    }
    End(grpc::Status::OK);
  }

  // The first event carries what a real decode node reports in DecodeServed.
  void WriteEvent() {
    if (!served_sent_) {
      served_sent_ = true;
      v1::DecodeServed* served = event_.mutable_served();
      served->mutable_layout()->mutable_parallel()->set_tp(kFakeDecodeTp);
      served->mutable_layout()->mutable_parallel()->set_block_size(kFakeBlockSize);
      served->set_kv_bytes(kFakeKvBytes);
      served->set_digests_verified(true);
    }
    StartWrite(&event_);
  }

  void End(grpc::Status status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(std::move(status));
  }

  FakeDecode* const owner_;
  const v1::DecodeRequest request_;
  const DecodeBehaviour behaviour_;
  const int to_emit_;
  int written_ = 0;
  bool finish_sent_ = false;
  bool served_sent_ = false;
  v1::DecodeEvent event_;
  absl::Mutex mu_;
  bool hanging_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

FakeDecode::FakeDecode(std::string name, std::shared_ptr<DecodeScript> script)
    : name_(std::move(name)), script_(std::move(script)) {
  server_ = StartLoopbackServer(this, &address_);
}

FakeDecode::~FakeDecode() { StopLoopbackServer(server_.get(), absl::Seconds(2)); }

std::vector<v1::DecodeRequest> FakeDecode::requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

std::vector<std::string> FakeDecode::request_ids() const {
  absl::MutexLock lock(&mu_);
  return request_ids_;
}

int FakeDecode::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool FakeDecode::WaitForCancelled(int n, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  const auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancelled_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

void FakeDecode::NoteCancelled() {
  absl::MutexLock lock(&mu_);
  ++cancelled_;
}

grpc::ServerWriteReactor<v1::DecodeEvent>* FakeDecode::Decode(grpc::CallbackServerContext* ctx,
                                                              const v1::DecodeRequest* request) {
  DecodeBehaviour behaviour;
  {
    absl::MutexLock lock(&script_->mu);
    if (!script_->calls.empty()) {
      behaviour = script_->calls.front();
      script_->calls.pop_front();
    }
  }
  {
    absl::MutexLock lock(&mu_);
    requests_.push_back(*request);
    request_ids_.push_back(RequestIdFromMetadata(*ctx, ""));
  }
  return new Stream(this, *request, behaviour);
}

grpc::ServerUnaryReactor* FakeDecode::Status(grpc::CallbackServerContext* ctx,
                                             const v1::StatusRequest*,
                                             v1::InstanceStatus* response) {
  *response = FakeStatus(v1::INSTANCE_ROLE_DECODE, name_, address_);
  return FinishUnary(ctx, grpc::Status::OK);
}

}  // namespace tandem::testing_router
