// Fuzz target: the transfer metadata a decode instance receives from a prefill instance in the
// handshake (serialized tandem.v1.TransferMetadata) through ParseTransferMetadata — layout,
// per-rank checksums, ValidateTransferMetadata (packed rkey shapes), derived placement — and the
// handshake's compatibility check. Accepted metadata must round-trip.
//
// Random bytes rarely carry a matching per-rank checksum, so the same message is also rebuilt
// as domain metadata (its layout and UCX fields, checksums ignored) and given to
// ValidateTransferMetadata directly; what that accepts must serialize and parse back.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/stubs/logging.h"
#include "kv_transfer/ucx/metadata_proto.h"
#include "kv_transfer/ucx/transfer_checks.h"
#include "proto/convert/kv_layout_proto.h"
#include "tandem/v1/kv_transfer.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace tandem {
namespace {

void CheckRoundTrip(const TransferMetadata& metadata) {
  const std::string bytes = SerializeTransferMetadata(metadata);
  absl::StatusOr<TransferMetadata> back = ParseTransferMetadata(bytes);
  TANDEM_FUZZ_CHECK(back.ok());
  TANDEM_FUZZ_CHECK(SerializeTransferMetadata(*back) == bytes);
  TANDEM_FUZZ_CHECK(CheckHandshake(metadata.compat_hash, *back).ok());
}

void ValidateRebuilt(const v1::TransferMetadata& p) {
  absl::StatusOr<KvLayout> layout = FromProto(p.layout(), InstanceRole::kPrefill);
  if (!layout.ok()) return;
  TransferMetadata m;
  m.engine_id = p.engine_id();
  m.epoch = p.epoch();
  m.compat_hash = p.compat_hash();
  m.layout = *layout;
  for (const v1::RankTransferInfo& r : p.ranks()) {
    m.ranks.push_back(
        RankTransferInfo{r.worker_address(), r.pool_base(), r.pool_bytes(), r.rkey()});
  }
  const absl::Status valid = ValidateTransferMetadata(m);
  if (!valid.ok()) {
    TANDEM_FUZZ_CHECK(valid.code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  CheckRoundTrip(m);
}

}  // namespace
}  // namespace tandem

// Parsing hostile bytes makes protobuf log every invalid UTF-8 string; the status is what counts.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<TransferMetadata> metadata = ParseTransferMetadata(bytes);
  if (metadata.ok()) {
    CheckRoundTrip(*metadata);
    const absl::Status other = CheckHandshake(metadata->compat_hash ^ 1, *metadata);
    TANDEM_FUZZ_CHECK(other.code() == absl::StatusCode::kFailedPrecondition);
  } else {
    TANDEM_FUZZ_CHECK(metadata.status().code() == absl::StatusCode::kInvalidArgument);
  }
  v1::TransferMetadata proto;
  if (proto.ParseFromArray(data, static_cast<int>(size))) ValidateRebuilt(proto);
  return 0;
}
