#include "client/cli_runner.h"

#include <grpcpp/client_context.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "client/cli_format.h"

namespace tandem {
namespace {

absl::Status ToAbsl(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace

int RunGenerate(const RouterFailover& routers, const v1::GenerateRequest& request,
                absl::Duration timeout, std::ostream& out, std::ostream& err) {
  const absl::Time start = absl::Now();
  GenerateStats stats;
  const RouterFailover::Outcome outcome = routers.Generate(
      request, start + timeout, [&](const v1::GenerateResponse& response, grpc::ClientContext&) {
        if (response.has_token()) {
          if (stats.tokens++ == 0) stats.ttft = absl::Now() - start;
          out << response.token().text() << std::flush;
        } else if (response.has_final()) {
          out << response.final().text_tail() << std::flush;
          stats.total = absl::Now() - start;
          stats.finish_reason = response.final().finish_reason();
          stats.retries = response.final().retries();
        }
      });
  if (stats.tokens > 0 || !stats.finish_reason.empty()) out << "\n" << std::flush;
  if (!outcome.status.ok()) {
    err << FormatErrorLine(ToAbsl(outcome.status)) << "\n";
    return 1;
  }
  err << FormatStats(stats) << "\n";
  return 0;
}

int RunGenerate(v1::Router::StubInterface& router, const v1::GenerateRequest& request,
                absl::Duration timeout, std::ostream& out, std::ostream& err) {
  return RunGenerate(RouterFailover({&router}), request, timeout, out, err);
}

int RunStatus(const RouterFailover& routers, absl::Duration timeout, std::ostream& out,
              std::ostream& err) {
  v1::ClusterStatusResponse cluster;
  const RouterFailover::Outcome outcome = routers.ClusterStatus(absl::Now() + timeout, &cluster);
  if (!outcome.status.ok()) {
    err << FormatErrorLine(ToAbsl(outcome.status)) << "\n";
    return 1;
  }
  out << FormatStatusTable(cluster);
  return 0;
}

int RunStatus(v1::Router::StubInterface& router, absl::Duration timeout, std::ostream& out,
              std::ostream& err) {
  return RunStatus(RouterFailover({&router}), timeout, out, err);
}

}  // namespace tandem
