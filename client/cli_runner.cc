#include "client/cli_runner.h"

#include <grpcpp/client_context.h>
#include <grpcpp/support/sync_stream.h>

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

int RunGenerate(v1::Router::StubInterface& router, const v1::GenerateRequest& request,
                absl::Duration timeout, std::ostream& out, std::ostream& err) {
  grpc::ClientContext ctx;
  const absl::Time start = absl::Now();
  ctx.set_deadline(absl::ToChronoTime(start + timeout));
  std::unique_ptr<grpc::ClientReaderInterface<v1::GenerateResponse>> reader =
      router.Generate(&ctx, request);
  GenerateStats stats;
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.has_token()) {
      if (stats.tokens++ == 0) stats.ttft = absl::Now() - start;
      out << response.token().text() << std::flush;
    } else if (response.has_final()) {
      out << response.final().text_tail() << std::flush;
      stats.total = absl::Now() - start;
      stats.finish_reason = response.final().finish_reason();
      stats.retries = response.final().retries();
    }
  }
  const grpc::Status status = reader->Finish();
  if (stats.tokens > 0 || !stats.finish_reason.empty()) out << "\n" << std::flush;
  if (!status.ok()) {
    err << FormatErrorLine(ToAbsl(status)) << "\n";
    return 1;
  }
  err << FormatStats(stats) << "\n";
  return 0;
}

int RunStatus(v1::Router::StubInterface& router, absl::Duration timeout, std::ostream& out,
              std::ostream& err) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::ClusterStatusResponse cluster;
  const grpc::Status status = router.ClusterStatus(&ctx, v1::ClusterStatusRequest(), &cluster);
  if (!status.ok()) {
    err << FormatErrorLine(ToAbsl(status)) << "\n";
    return 1;
  }
  out << FormatStatusTable(cluster);
  return 0;
}

}  // namespace tandem
