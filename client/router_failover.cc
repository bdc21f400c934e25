#include "client/router_failover.h"

#include <grpcpp/support/sync_stream.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace tandem {

absl::StatusOr<std::vector<std::string>> ParseRouterList(absl::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--router: empty address in '", list,
                                                     "' (expected HOST:PORT[,HOST:PORT...])"));
    }
    out.emplace_back(entry);
  }
  return out;
}

RouterFailover::RouterFailover(std::vector<v1::Router::StubInterface*> routers)
    : routers_(std::move(routers)) {}

grpc::Status RouterFailover::NoRouter() {
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "no router address given");
}

size_t RouterFailover::NextStart() const {
  if (routers_.empty()) return 0;
  return static_cast<size_t>(next_.fetch_add(1, std::memory_order_relaxed) % routers_.size());
}

RouterFailover::Outcome RouterFailover::Generate(const v1::GenerateRequest& request,
                                                 absl::Time deadline,
                                                 const OnResponse& on_response) const {
  Outcome out{NoRouter()};
  const size_t start = NextStart();
  for (size_t attempt = 0; attempt < routers_.size(); ++attempt) {
    const size_t index = (start + attempt) % routers_.size();
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    std::unique_ptr<grpc::ClientReaderInterface<v1::GenerateResponse>> reader =
        routers_[index]->Generate(&ctx, request);
    bool answered = false;
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      answered = true;
      if (on_response) on_response(response, ctx);
    }
    out.status = reader->Finish();
    out.router = static_cast<int>(index);
    const grpc::StatusCode code = out.status.error_code();
    const bool refused =
        code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::CANCELLED;
    if (answered || !refused) return out;
    ++out.refusals;
    if (absl::Now() >= deadline) return out;
  }
  return out;
}

RouterFailover::Outcome RouterFailover::ClusterStatus(absl::Time deadline,
                                                      v1::ClusterStatusResponse* response) const {
  Outcome out{NoRouter()};
  const size_t start = NextStart();
  for (size_t attempt = 0; attempt < routers_.size(); ++attempt) {
    const size_t index = (start + attempt) % routers_.size();
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    response->Clear();
    out.status = routers_[index]->ClusterStatus(&ctx, v1::ClusterStatusRequest(), response);
    out.router = static_cast<int>(index);
    if (out.status.error_code() != grpc::StatusCode::UNAVAILABLE) return out;
    ++out.refusals;
    if (absl::Now() >= deadline) return out;
  }
  return out;
}

}  // namespace tandem
