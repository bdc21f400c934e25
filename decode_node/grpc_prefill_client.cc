#include "decode_node/grpc_prefill_client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "kv_transfer/ucx/metadata_proto.h"
#include "serving/grpc_status.h"

namespace tandem {

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
    return absl::UnavailableError(absl::StrCat("cannot get transfer metadata from prefill ",
                                               address, ": ", s.error_message()));
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
  v1::ReleaseKvResponse resp;
  const grpc::Status s = Stub(kv.prefill_address)->ReleaseKv(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp.lease_held();
}

}  // namespace tandem
