// tandem: command-line client of a Tandem router.
//   tandem generate --router ADDR[,ADDR...] (--prompt TEXT | --prompt_ids 1,2,3 | --chat MSG
//                   [--system S]) [--max_tokens N --temperature T --top_k K --top_p P --seed S
//                   --ignore_eos]
//   tandem status --router ADDR[,ADDR...]
// Several routers: a router that refuses with UNAVAILABLE before answering (draining, stopped)
// is passed over for the next (client/router_failover.h).
// TLS: --tls_ca (verify the router), --tls_cert/--tls_key (a client certificate); API key:
// --api_key or $TANDEM_API_KEY (docs/security.md).
// Parses flags and wires; the work is in client/cli_runner.h and client/cli_format.h.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"
#include "client/cli_format.h"
#include "client/cli_runner.h"
#include "client/router_failover.h"
#include "common/flag_dashes.h"
#include "serving/client_channel.h"
#include "serving/tls_flags.h"
#include "tandem/v1/router.grpc.pb.h"

ABSL_FLAG(std::string, router, "127.0.0.1:50050",
          "router address host:port, or several comma-separated replicas: each call starts at "
          "the next one in turn and moves on while a router refuses it with UNAVAILABLE");
ABSL_FLAG(std::string, model, "", "model name (default: the router's)");
ABSL_FLAG(std::string, prompt, "", "prompt text (special tokens are parsed)");
ABSL_FLAG(std::string, prompt_ids, "", "prompt as comma-separated token ids");
ABSL_FLAG(std::string, chat, "", "a user message, formatted with the model's chat template");
ABSL_FLAG(std::string, system, "", "system message for --chat");
ABSL_FLAG(int32_t, max_tokens, 64, "tokens to generate");
ABSL_FLAG(float, temperature, 0.f, "0 = greedy");
ABSL_FLAG(int32_t, top_k, 0, "0 = disabled");
ABSL_FLAG(float, top_p, 1.f, "nucleus sampling mass in (0, 1]; 1 = off, 0 is an error");
ABSL_FLAG(uint64_t, seed, 0, "sampling seed");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past stop tokens");
ABSL_FLAG(int32_t, timeout_ms, 600000, "deadline of the whole call");
ABSL_FLAG(std::string, api_key, "",
          "the router's API key, sent as 'authorization: Bearer KEY' (default: $TANDEM_API_KEY)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "tandem generate --router ADDR[,ADDR...] (--prompt TEXT | --prompt_ids 1,2,3 | --chat MSG) "
      "...\n"
      "tandem status --router ADDR[,ADDR...]");
  tandem::NormalizeFlagDashes(argc, argv);
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const std::string command = positional.size() == 2 ? positional[1] : "";
  if (command != "generate" && command != "status") {
    std::fprintf(stderr, "usage:\n%s\n", absl::ProgramUsageMessage().data());
    return 2;
  }
  const absl::StatusOr<tandem::TlsConfig> tls =
      tandem::LoadTlsConfig(tandem::TlsFilesFromFlags(), tandem::TlsRole::kClient);
  if (!tls.ok()) {
    std::cerr << tandem::FormatErrorLine(tls.status()) << "\n";
    return 1;
  }
  std::string api_key = absl::GetFlag(FLAGS_api_key);
  if (const char* env = std::getenv("TANDEM_API_KEY"); api_key.empty() && env != nullptr) {
    api_key = env;
  }
  const absl::StatusOr<std::vector<std::string>> addresses =
      tandem::ParseRouterList(absl::GetFlag(FLAGS_router));
  if (!addresses.ok()) {
    std::cerr << tandem::FormatErrorLine(addresses.status()) << "\n";
    return 1;
  }
  std::vector<std::unique_ptr<tandem::v1::Router::Stub>> stubs;
  std::vector<tandem::v1::Router::StubInterface*> routers;
  for (const std::string& address : *addresses) {
    stubs.push_back(tandem::v1::Router::NewStub(
        tandem::CreateClientChannel(address, tandem::GrpcChannelCredentials(*tls), api_key)));
    routers.push_back(stubs.back().get());
  }
  const tandem::RouterFailover failover(std::move(routers));
  const absl::Duration timeout = absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  if (command == "status") return tandem::RunStatus(failover, timeout, std::cout, std::cerr);

  tandem::GenerateArgs args;
  args.model = absl::GetFlag(FLAGS_model);
  args.prompt = absl::GetFlag(FLAGS_prompt);
  args.prompt_ids = absl::GetFlag(FLAGS_prompt_ids);
  args.chat = absl::GetFlag(FLAGS_chat);
  args.system = absl::GetFlag(FLAGS_system);
  args.max_tokens = absl::GetFlag(FLAGS_max_tokens);
  args.temperature = absl::GetFlag(FLAGS_temperature);
  args.top_k = absl::GetFlag(FLAGS_top_k);
  args.top_p = absl::GetFlag(FLAGS_top_p);
  args.seed = absl::GetFlag(FLAGS_seed);
  args.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  const absl::StatusOr<tandem::v1::GenerateRequest> request = tandem::BuildGenerateRequest(args);
  if (!request.ok()) {
    std::cerr << tandem::FormatErrorLine(request.status()) << "\n";
    return 1;
  }
  return tandem::RunGenerate(failover, *request, timeout, std::cout, std::cerr);
}
