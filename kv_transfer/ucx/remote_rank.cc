#include "kv_transfer/ucx/remote_rank.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kv_transfer/ucx/ucx_status.h"

namespace tandem {
namespace {

// ucp_ep_create and ucp_ep_rkey_unpack take these buffers without a length and trust the
// lengths encoded inside. Metadata that arrived over the wire is checksummed (metadata_proto.h),
// but a truncated buffer handed over in-process would still make UCX read past its end. Packed
// rkeys are bounded by 64 memory domains × (1 + 255) bytes plus small headers, and worker
// addresses are similarly built from one-byte lengths, so zero padding of this size keeps
// every read inside our allocation; the zeros decode as empty entries.
constexpr size_t kUcxBufferPadding = 64 * 1024;

std::vector<char> Padded(absl::string_view bytes) {
  std::vector<char> out(bytes.size() + kUcxBufferPadding, 0);
  bytes.copy(out.data(), bytes.size());
  return out;
}

// The local address of the source pool when UCX mapped it (shared memory), else null. Both ends
// are translated, so a pool UCX mapped only in part is never read through the pointer.
const std::byte* MappedPool(ucp_rkey_h rkey, const RankTransferInfo& info) {
  if (info.pool_bytes <= 0) return nullptr;
  void* first = nullptr;
  void* last = nullptr;
  if (ucp_rkey_ptr(rkey, info.pool_base, &first) != UCS_OK ||
      ucp_rkey_ptr(rkey, info.pool_base + static_cast<uint64_t>(info.pool_bytes - 1), &last) !=
          UCS_OK) {
    return nullptr;
  }
  const auto* begin = static_cast<const std::byte*>(first);
  if (static_cast<const std::byte*>(last) != begin + (info.pool_bytes - 1)) return nullptr;
  return begin;
}

}  // namespace

PackedRkeyLayout LinkedUcxRkeyLayout() {
  static const PackedRkeyLayout layout = [] {
    unsigned major = 0, minor = 0, release = 0;
    ucp_get_version(&major, &minor, &release);
    return PackedRkeyLayoutFor(major, minor);
  }();
  return layout;
}

RemoteRank::RemoteRank(UcxWorker* worker, const RankTransferInfo& info, std::string label)
    : worker_(worker),
      worker_address_(info.worker_address),
      packed_rkey_(info.rkey),
      pool_base_(info.pool_base),
      label_(std::move(label)) {}

absl::StatusOr<std::unique_ptr<RemoteRank>> RemoteRank::Connect(UcxWorker* worker,
                                                                const RankTransferInfo& info,
                                                                std::string label) {
  std::unique_ptr<RemoteRank> self(new RemoteRank(worker, info, std::move(label)));
  const std::vector<char> address = Padded(info.worker_address);
  ucs_status_t created = UCS_ERR_UNREACHABLE;
  if (worker->context()->can_detect_peer_failure()) {
    created = self->CreateEndpoint(address.data(), /*peer_mode=*/true);
  }
  // Only shared-memory paths reach this peer (or only those are enabled here).
  if (created == UCS_ERR_UNREACHABLE) {
    created = self->CreateEndpoint(address.data(), /*peer_mode=*/false);
  }
  absl::Status status =
      ToStatus(created, absl::StrCat("connecting to ", self->label_, " (ucp_ep_create)"));
  if (!status.ok()) return status;
  const std::vector<char> rkey = Padded(info.rkey);
  status = ToStatus(ucp_ep_rkey_unpack(self->endpoint_, rkey.data(), &self->rkey_),
                    absl::StrCat("unpacking the pool rkey of ", self->label_));
  if (!status.ok()) {
    self->rkey_ = nullptr;
    return status;  // the destructor closes the endpoint
  }
  self->mapped_pool_ = MappedPool(self->rkey_, info);
  return self;
}

ucs_status_t RemoteRank::CreateEndpoint(const void* address, bool peer_mode) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = static_cast<const ucp_address_t*>(address);
  params.err_mode = peer_mode ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  if (peer_mode) {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_handler.cb = &RemoteRank::OnEndpointError;
    params.err_handler.arg = this;
  }
  ucp_ep_h endpoint = nullptr;
  const ucs_status_t status = ucp_ep_create(worker_->get(), &params, &endpoint);
  if (status == UCS_OK) {
    endpoint_ = endpoint;
    peer_mode_ = peer_mode;
  }
  return status;
}

RemoteRank::~RemoteRank() {
  if (rkey_ != nullptr) ucp_rkey_destroy(rkey_);
  if (endpoint_ == nullptr) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = peer_mode_ ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t request = ucp_ep_close_nbx(endpoint_, &param);
  if (!UCS_PTR_IS_PTR(request)) return;  // closed at once (or failed; resources are released)
  const absl::Time deadline = absl::Now() + kCloseTimeout;
  while (ucp_request_check_status(request) == UCS_INPROGRESS && absl::Now() < deadline) {
    if (worker_->ProgressAll() == 0) {
      worker_->WaitForEvent(absl::Milliseconds(1)).IgnoreError();
    }
  }
  // If the close is still running, UCX finishes and releases it internally.
  ucp_request_free(request);
}

void RemoteRank::OnEndpointError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* self = static_cast<RemoteRank*>(arg);
  if (!self->error_.ok()) return;
  const absl::Status cause = ToStatus(status, "UCX reported the endpoint failed");
  self->error_ = absl::UnavailableError(absl::StrCat(self->label_, ": ", cause.message()));
}

// Any get failure but our own cancellation: bounds are checked before posting, so a get on a
// healthy endpoint has no other way to fail, and the connection is not to be trusted again.
void RemoteRank::MarkFailed(ucs_status_t status) {
  if (status == UCS_OK || status == UCS_ERR_CANCELED || !error_.ok()) return;
  const absl::Status cause = ToStatus(status, "an operation on the endpoint failed");
  error_ = absl::UnavailableError(absl::StrCat(label_, ": ", cause.message()));
}

bool RemoteRank::ConnectedTo(const RankTransferInfo& info) const {
  return info.worker_address == worker_address_ && info.rkey == packed_rkey_ &&
         info.pool_base == pool_base_;
}

}  // namespace tandem
