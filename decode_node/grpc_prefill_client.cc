#include "decode_node/grpc_prefill_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/kv_source_failure.h"
#include "kv_transfer/ucx/metadata_proto.h"
#include "proto/convert/sampling_proto.h"
#include "serving/grpc_status.h"

namespace tandem {
namespace {

// Reads a WatchKv stream on its own thread; Next() waits on what it has read.
class GrpcKvWatch final : public KvWatch {
 public:
  GrpcKvWatch(v1::PrefillService::Stub* stub, const KvHandle& kv, absl::Time deadline)
      : address_(kv.prefill_address) {
    ctx_.set_deadline(absl::ToChronoTime(deadline));
    v1::WatchKvRequest req;
    req.set_request_id(kv.request_id);
    req.set_generation(kv.generation);
    reader_ = stub->WatchKv(&ctx_, req);
    thread_ = std::thread([this] { Read(); });
  }
  ~GrpcKvWatch() override {
    ctx_.TryCancel();
    thread_.join();
  }

  absl::StatusOr<std::optional<KvProgressEvent>> Next(absl::Duration timeout,
                                                      const CancellationToken& cancel) override {
    // A cancel takes and drops mu_, so the wait looks at its condition again.
    const CancelCallback wake = cancel.OnCancel([this] { absl::MutexLock touch(&mu_); });
    absl::MutexLock lock(&mu_);
    auto ready = [this, &cancel]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return fresh_ || ended_ || cancel.cancelled();
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    if (fresh_) {
      fresh_ = false;
      return std::optional<KvProgressEvent>(latest_);
    }
    if (latest_.done) return std::optional<KvProgressEvent>(latest_);
    if (!ended_) return std::optional<KvProgressEvent>();
    // Either way the stream from the KV's source broke: the failure is about that node.
    if (end_.ok()) {
      return BlameKvSource(
          absl::UnknownError(absl::StrCat("KV progress stream from prefill ", address_,
                                          " ended before the prefill finished")),
          {address_, "", {}});
    }
    return BlameKvSource(absl::Status(end_.code(), absl::StrCat("KV progress stream from prefill ",
                                                                address_, ": ", end_.message())),
                         {address_, "", {}});
  }

 private:
  void Read() {
    v1::KvProgress msg;
    while (reader_->Read(&msg)) {
      absl::MutexLock lock(&mu_);
      if (latest_.done) continue;
      latest_.tokens_ready = std::max(latest_.tokens_ready, msg.tokens_ready());
      latest_.done = msg.done();
      latest_.first_token = msg.first_token();
      if (msg.done()) {
        latest_.kv_digests.assign(msg.kv_digests().begin(), msg.kv_digests().end());
        if (msg.has_first_logprobs()) latest_.first_logprobs = FromProto(msg.first_logprobs());
      }
      fresh_ = true;
    }
    const absl::Status end = FromGrpcStatus(reader_->Finish());
    absl::MutexLock lock(&mu_);
    end_ = end;
    ended_ = true;
  }

  const std::string address_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::KvProgress>> reader_;
  absl::Mutex mu_;
  KvProgressEvent latest_ ABSL_GUARDED_BY(mu_);
  bool fresh_ ABSL_GUARDED_BY(mu_) = false;  // latest_ not returned by Next yet
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts after every member above is initialised
};

}  // namespace

GrpcPrefillClient::GrpcPrefillClient(std::shared_ptr<grpc::ChannelCredentials> credentials)
    : credentials_(credentials != nullptr ? std::move(credentials)
                                          : grpc::InsecureChannelCredentials()) {}

v1::PrefillService::Stub* GrpcPrefillClient::Stub(const std::string& address) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<v1::PrefillService::Stub>& stub = stubs_[address];
  if (stub == nullptr) {
    stub = v1::PrefillService::NewStub(grpc::CreateChannel(address, credentials_));
  }
  return stub.get();
}

absl::StatusOr<TransferMetadata> GrpcPrefillClient::GetTransferMetadata(const std::string& address,
                                                                        absl::Time deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  v1::TransferMetadata proto;
  const grpc::Status s =
      Stub(address)->GetTransferMetadata(&ctx, v1::GetTransferMetadataRequest(), &proto);
  if (!s.ok()) {
    return BlameKvSource(
        absl::UnavailableError(absl::StrCat("cannot get transfer metadata from prefill ", address,
                                            ": ", s.error_message())),
        {address, "", {}});
  }
  return FromProto(proto);
}

absl::StatusOr<std::optional<absl::Time>> GrpcPrefillClient::RenewLease(const KvHandle& kv,
                                                                        absl::Time deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  v1::RenewLeaseRequest req;
  req.set_request_id(kv.request_id);
  req.set_generation(kv.generation);
  v1::RenewLeaseResponse resp;
  const grpc::Status s = Stub(kv.prefill_address)->RenewLease(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  if (!resp.renewed()) return std::optional<absl::Time>();
  return std::optional<absl::Time>(absl::FromUnixMillis(resp.lease_expiry_unix_ms()));
}

absl::StatusOr<bool> GrpcPrefillClient::ReleaseKv(const KvHandle& kv, absl::Time deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  v1::ReleaseKvRequest req;
  req.set_request_id(kv.request_id);
  req.set_epoch(kv.epoch);
  req.set_generation(kv.generation);
  for (int32_t b : kv.block_table) req.add_block_table(b);
  for (uint32_t g : kv.block_generations) req.add_block_generations(g);
  v1::ReleaseKvResponse resp;
  const grpc::Status s = Stub(kv.prefill_address)->ReleaseKv(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp.lease_held();
}

absl::StatusOr<std::unique_ptr<KvWatch>> GrpcPrefillClient::WatchKv(const KvHandle& kv,
                                                                    absl::Time deadline) {
  return std::unique_ptr<KvWatch>(new GrpcKvWatch(Stub(kv.prefill_address), kv, deadline));
}

}  // namespace tandem
