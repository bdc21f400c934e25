// A real local cluster for end-to-end tests: router(s) + prefill + decode processes on 127.0.0.1,
// started from the built binaries, each listening on port 0 and reporting its port (and
// readiness) through a port file. Children get SIGKILL if the test process dies (PDEATHSIG), and
// the destructor stops every process it started (SIGTERM, bounded wait, SIGKILL) and reaps it.
#pragma once

#include <grpcpp/security/credentials.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tandem/v1/router.grpc.pb.h"

namespace tandem::testing {

struct NodeSpec {
  std::vector<std::string> flags;  // e.g. {"--tp=2", "--dcp=2"}
};

struct ClusterSpec {
  std::string model_path;
  std::string decode_model_path;  // empty = model_path (different: incompatible-pair tests)
  std::vector<NodeSpec> prefill;
  std::vector<NodeSpec> decode;
  std::vector<std::string> router_flags;
  int routers = 1;  // router replicas in front of the same nodes, each with router_flags
  // The test's own channels (to the router and, for Loads, to the nodes): nullptr = insecure;
  // TLS credentials with a client certificate for a mutual-TLS cluster (tests/security).
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string api_key;  // sent to the router as 'authorization: Bearer KEY' when non-empty
};

struct GenerateOutcome {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::vector<int32_t> indices;             // TokenChunk.index of each token
  std::vector<v1::TokenLogprobs> logprobs;  // TokenChunk.logprobs of each token (when asked)
  std::string text;
  v1::GenerateFinal final;
  // GenerateRequest.n > 1: the tokens, text and end of each choice (TokenChunk.choice), and the
  // choice of every token in arrival order.
  std::map<int32_t, std::vector<int32_t>> choice_tokens;
  std::map<int32_t, std::string> choice_text;
  std::map<int32_t, v1::ChoiceEnd> choice_ends;
  std::vector<int32_t> choice_order;
};

struct InstanceLoadView {
  std::string address;
  v1::InstanceLoad load;
  int64_t block_free_errors = 0;               // InstanceStatus.block_free_errors
  int32_t ranks = 0;                           // tp × pcp of the instance's layout
  std::vector<int64_t> weight_bytes_per_rank;  // InstanceStatus.weight_bytes_per_rank
};

class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(
      const ClusterSpec& spec, absl::Duration timeout = absl::Minutes(2));
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  const std::string& router_address() const { return router_addresses_[0]; }
  const std::vector<std::string>& router_addresses() const { return router_addresses_; }
  // Router `index`'s stub (valid as long as the cluster).
  v1::Router::StubInterface* router_stub(int index) const { return routers_[index].get(); }
  const std::vector<std::string>& prefill_addresses() const { return prefill_; }
  const std::vector<std::string>& decode_addresses() const { return decode_; }

  // Streams one request through router `router`; `on_token` sees each token as it arrives (may
  // cancel `ctx`).
  GenerateOutcome Generate(
      const v1::GenerateRequest& request, absl::Duration timeout,
      const std::function<void(int32_t index, grpc::ClientContext&)>& on_token = nullptr,
      int router = 0);

  // What the standard gRPC health service (grpc.health.v1.Health/Check, service "") of the
  // process at `address` says: true for SERVING, false for NOT_SERVING; UNAVAILABLE when it does
  // not answer within `timeout`.
  absl::StatusOr<bool> HealthServing(const std::string& address, absl::Duration timeout);

  // Status of every prefill and decode instance still running (killed ones are skipped). The
  // destructor also asserts that none of them counted a failed BlockManager::Free.
  absl::StatusOr<std::vector<InstanceLoadView>> Loads();
  // Waits until every instance reports free blocks == total, no leases, nothing running or queued.
  absl::Status WaitIdle(absl::Duration timeout);

  // SIGKILLs a node process ("prefill" or "decode", index).
  void Kill(const std::string& role, int index);
  // SIGKILLs every decode node whose Status shows a request running (the "kill the node serving
  // it mid-answer" step of the resume tests); how many it killed, or Loads()' error.
  absl::StatusOr<int> KillRunningDecodeNodes();
  // SIGTERMs a process ("prefill", "decode" or "router" with its index) and returns at once: the
  // process drains (docs/deployment.md).
  void Terminate(const std::string& role, int index);
  // Waits up to `timeout` for that process to exit and reaps it: its waitpid status, or
  // DEADLINE_EXCEEDED (the process is then left running for the destructor).
  absl::StatusOr<int> WaitExit(const std::string& role, int index, absl::Duration timeout);
  // The process's log so far.
  std::string Log(const std::string& role, int index) const;
  // The last lines of every process's log, for failure messages.
  std::string LogTails(int lines = 15) const;

 private:
  struct Process {
    std::string name;
    pid_t pid = -1;
    std::string log;
    std::string address;
  };
  LocalCluster() = default;
  Process* Find(const std::string& role, int index);
  absl::StatusOr<std::string> Spawn(const std::string& name, const std::string& binary,
                                    std::vector<std::string> args, absl::Time deadline);
  absl::Status WaitHealthy(absl::Time deadline);

  std::string dir_;
  std::vector<Process> processes_;
  std::vector<std::string> router_addresses_;
  std::vector<std::string> prefill_, decode_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::vector<std::unique_ptr<v1::Router::Stub>> routers_;
};

// Adds one Generate response (a token or the final) to `out`, as LocalCluster::Generate does.
void AddResponse(const v1::GenerateResponse& response, GenerateOutcome* out);

// `n` token ids in [3, 253) drawn from `seed` (valid for every synthetic model's vocabulary).
std::vector<int32_t> RandomPrompt(int n, uint64_t seed);
// A Generate request for token ids that ignores EOS, so exactly `max_tokens` come back.
v1::GenerateRequest IdsRequest(const std::vector<int32_t>& prompt, int32_t max_tokens);

}  // namespace tandem::testing
