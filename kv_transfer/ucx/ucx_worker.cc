#include "kv_transfer/ucx/ucx_worker.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kv_transfer/ucx/ucx_status.h"

namespace tandem {
namespace {

struct ConfigDeleter {
  void operator()(ucp_config_t* config) const { ucp_config_release(config); }
};

struct AddressDeleter {
  ucp_worker_h worker;
  void operator()(ucp_address_t* address) const { ucp_worker_release_address(worker, address); }
};

// UCX has no query for its enabled transports; ucp_context_print_info lists them, one
// "#      resource 1  :  md 1  dev 1  flags -- tcp/lo" line each.
std::vector<std::string> EnabledResources(ucp_context_h context) {
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return {};
  ucp_context_print_info(context, stream);
  std::fclose(stream);
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text, size), '\n')) {
    if (!absl::StrContains(line, "resource")) continue;
    const size_t flags = line.find("-- ");
    if (flags == absl::string_view::npos) continue;
    out.emplace_back(absl::StripAsciiWhitespace(line.substr(flags + 3)));
  }
  std::free(text);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<UcxContext>> UcxContext::Create(const UcxOptions& options) {
  ucp_config_t* raw_config = nullptr;
  absl::Status status = ToStatus(ucp_config_read(nullptr, nullptr, &raw_config), "ucp_config_read");
  if (!status.ok()) return status;
  std::unique_ptr<ucp_config_t, ConfigDeleter> config(raw_config);
  for (const auto& [name, value] : options.config) {
    status = ToStatus(ucp_config_modify(config.get(), name.c_str(), value.c_str()),
                      absl::StrCat("ucp_config_modify ", name, "=", value));
    if (!status.ok()) return status;
  }

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;  // one worker per context (one per rank)
  ucp_context_h context = nullptr;
  status = ToStatus(ucp_init(&params, config.get(), &context), "ucp_init");
  if (!status.ok()) return status;
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  status = ToStatus(ucp_context_query(context, &attr), "ucp_context_query(MEMORY_TYPES)");
  if (!status.ok()) {
    ucp_cleanup(context);
    return status;
  }
  return std::unique_ptr<UcxContext>(
      new UcxContext(context, EnabledResources(context), attr.memory_types));
}

bool UcxContext::supports_cuda_memory() const {
  return (memory_types_ & (uint64_t{1} << UCS_MEMORY_TYPE_CUDA)) != 0;
}

std::string UcxContext::memory_type_names() const {
  std::string out;
  for (int t = 0; t < UCS_MEMORY_TYPE_LAST; ++t) {
    if ((memory_types_ & (uint64_t{1} << t)) == 0) continue;
    absl::StrAppend(&out, out.empty() ? "" : ",", ucs_memory_type_names[t]);
  }
  return out;
}

UcxContext::~UcxContext() { ucp_cleanup(context_); }

bool UcxContext::can_detect_peer_failure() const {
  static constexpr absl::string_view kWithoutPeerFailure[] = {"self", "sysv", "posix",
                                                              "cma",  "knem", "xpmem"};
  for (const std::string& resource : resources_) {
    const absl::string_view transport = absl::string_view(resource).substr(0, resource.find('/'));
    if (std::find(std::begin(kWithoutPeerFailure), std::end(kWithoutPeerFailure), transport) ==
        std::end(kWithoutPeerFailure)) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::unique_ptr<UcxWorker>> UcxWorker::Create(std::shared_ptr<UcxContext> context) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h worker = nullptr;
  absl::Status status =
      ToStatus(ucp_worker_create(context->get(), &params, &worker), "ucp_worker_create");
  if (!status.ok()) return status;
  int event_fd = -1;
  status = ToStatus(ucp_worker_get_efd(worker, &event_fd), "ucp_worker_get_efd");
  if (!status.ok()) {
    ucp_worker_destroy(worker);
    return status;
  }
  return std::unique_ptr<UcxWorker>(new UcxWorker(std::move(context), worker, event_fd));
}

UcxWorker::~UcxWorker() { ucp_worker_destroy(worker_); }

absl::StatusOr<std::string> UcxWorker::PackedAddress() const {
  ucp_address_t* raw = nullptr;
  size_t length = 0;
  absl::Status status =
      ToStatus(ucp_worker_get_address(worker_, &raw, &length), "ucp_worker_get_address");
  if (!status.ok()) return status;
  std::unique_ptr<ucp_address_t, AddressDeleter> address(raw, AddressDeleter{worker_});
  return std::string(reinterpret_cast<const char*>(address.get()), length);
}

unsigned UcxWorker::ProgressAll() {
  unsigned total = 0;
  while (unsigned n = ucp_worker_progress(worker_)) total += n;
  return total;
}

absl::Status UcxWorker::WaitForEvent(absl::Duration timeout) {
  const ucs_status_t armed = ucp_worker_arm(worker_);
  if (armed == UCS_ERR_BUSY) return absl::OkStatus();  // events pending: do not block
  absl::Status status = ToStatus(armed, "ucp_worker_arm");
  if (!status.ok()) return status;
  pollfd pfd{event_fd_, POLLIN, 0};
  // Round up so that a sub-millisecond remainder still blocks instead of spinning.
  const int timeout_ms =
      static_cast<int>(absl::ToInt64Milliseconds(timeout + absl::Microseconds(999)));
  if (poll(&pfd, 1, timeout_ms < 0 ? 0 : timeout_ms) < 0 && errno != EINTR) {
    return absl::InternalError(absl::StrCat("poll on UCX worker event fd: ", strerror(errno)));
  }
  return absl::OkStatus();
}

void UcxWorker::Signal() { ucp_worker_signal(worker_); }

}  // namespace tandem
