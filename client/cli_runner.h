// The `tandem` CLI's commands against a router: generate (stream text as it arrives, then a
// stats line) and status (the fleet table). Output goes to the given streams so tests can read
// it; the return value is the process exit code (0 on success, 1 on any error, after printing
// FormatErrorLine to `err`). With several routers (RouterFailover) a router that refuses the call
// with UNAVAILABLE before answering is passed over for the next one (client/router_failover.h).
//
// Thread-safety: one command per call; the stub may be shared.
#pragma once

#include <ostream>

#include "absl/time/time.h"
#include "client/router_failover.h"
#include "tandem/v1/router.grpc.pb.h"

namespace tandem {

int RunGenerate(const RouterFailover& routers, const v1::GenerateRequest& request,
                absl::Duration timeout, std::ostream& out, std::ostream& err);
int RunGenerate(v1::Router::StubInterface& router, const v1::GenerateRequest& request,
                absl::Duration timeout, std::ostream& out, std::ostream& err);

int RunStatus(const RouterFailover& routers, absl::Duration timeout, std::ostream& out,
              std::ostream& err);
int RunStatus(v1::Router::StubInterface& router, absl::Duration timeout, std::ostream& out,
              std::ostream& err);

}  // namespace tandem
