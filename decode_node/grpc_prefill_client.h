// PrefillClient over gRPC (tandem.v1.PrefillService): one channel per prefill address, created
// on first use and kept. Metadata arrives as tandem.v1.TransferMetadata and is validated on
// parse (kv_transfer/ucx/metadata_proto.h). The channels use `credentials` (TLS with this
// node's certificate as the client certificate when the cluster runs mutual TLS,
// serving/tls_credentials.h). Thread-safety: thread-safe.
#pragma once

#include <grpcpp/security/credentials.h>

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "decode_node/prefill_client.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem {

class GrpcPrefillClient final : public PrefillClient {
 public:
  // nullptr: insecure channels.
  explicit GrpcPrefillClient(std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

  absl::StatusOr<TransferMetadata> GetTransferMetadata(const std::string& address,
                                                       absl::Time deadline) override;
  absl::StatusOr<std::optional<absl::Time>> RenewLease(const KvHandle& kv,
                                                       absl::Time deadline) override;
  absl::StatusOr<bool> ReleaseKv(const KvHandle& kv, absl::Time deadline) override;
  // A thread per watch reads the stream; errors name the prefill ("prefill <address>").
  absl::StatusOr<std::unique_ptr<KvWatch>> WatchKv(const KvHandle& kv,
                                                   absl::Time deadline) override;

 private:
  v1::PrefillService::Stub* Stub(const std::string& address);

  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<v1::PrefillService::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem
