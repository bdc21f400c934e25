// tandem-bench (the built binary) against a real local cluster (router + prefill + decode
// processes on a synthetic model), through the router's gRPC API (closed and open loop), its
// OpenAI-compatible HTTP API and directly to the nodes (--backend=direct): every request sent is
// accounted for (ok + failed = sent; here all ok) and the tokens the tool counted from the stream
// equal what the cluster reported it generated (GenerateFinal usage; DecodeFinish.generated for
// --backend=direct) and what was asked for (ignore_eos: exactly max_tokens each). Afterwards every
// instance is idle (no KV leaked).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "bench/serve/length_distribution.h"
#include "bench/serve/request_source.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/reference.h"

namespace tandem::testing {
namespace {

struct BenchRun {
  int exit_code = -1;
  std::string output;
  nlohmann::json json;
};

// Runs tandem-bench with `flags`, bounded by `timeout 180`, and reads its JSON report.
BenchRun RunBench(const std::vector<std::string>& flags) {
  const std::string dir = ::testing::TempDir();
  static int run = 0;
  const std::string json = absl::StrCat(dir, "/bench_", ::getpid(), "_", run, ".json");
  const std::string log = absl::StrCat(dir, "/bench_", ::getpid(), "_", run++, ".log");
  const std::string cmd =
      absl::StrCat("timeout -k 5 180 ", TANDEM_BENCH_BIN, " ", absl::StrJoin(flags, " "),
                   " --json_out=", json, " > ", log, " 2>&1");
  BenchRun r;
  const int status = std::system(cmd.c_str());
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream lf(log);
  std::stringstream ss;
  ss << lf.rdbuf();
  r.output = ss.str();
  std::ifstream jf(json);
  if (jf) r.json = nlohmann::json::parse(jf, nullptr, false);
  return r;
}

// The first line of `path` once it exists and is non-empty ("" after `timeout`): the router
// writes its HTTP port file when it is serving.
std::string WaitForFile(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::ifstream f(path);
    std::string line;
    if (f && std::getline(f, line) && !line.empty()) return line;
    absl::SleepFor(absl::Milliseconds(20));  // polling a file with a bound
  }
  return "";
}

// Output tokens the run asked for: the same RequestSource the tool builds from these settings.
int64_t RequestedTokens(uint64_t seed, const std::string& prompt_len, const std::string& output_len,
                        int64_t n) {
  bench::RequestSourceOptions o;
  o.seed = seed;
  o.prompt_len = *bench::LengthDistribution::Parse(prompt_len);
  o.output_len = *bench::LengthDistribution::Parse(output_len);
  o.token_id_lo = 3;
  o.token_id_hi = 259;
  const bench::RequestSource source = *bench::RequestSource::Create(o);
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) total += source.Make(i).max_tokens;
  return total;
}

void ExpectAccounted(const BenchRun& run, int64_t sent, int64_t requested_tokens,
                     const LocalCluster& cluster) {
  ASSERT_EQ(run.exit_code, 0) << run.output << "\n" << cluster.LogTails();
  ASSERT_TRUE(run.json.is_object()) << run.output;
  const nlohmann::json& r = run.json["report"];
  EXPECT_EQ(r["requests_sent"], sent);
  EXPECT_EQ(r["requests_ok"].get<int64_t>() + r["requests_failed"].get<int64_t>(), sent);
  EXPECT_EQ(r["requests_ok"], sent) << r["failures_by_error"].dump();
  EXPECT_EQ(r["output_tokens"], requested_tokens);
  EXPECT_EQ(r["server_output_tokens"], requested_tokens);
  EXPECT_EQ(r["ttft"]["count"], sent);
  EXPECT_GT(r["output_tokens_per_s"].get<double>(), 0);
  EXPECT_NE(run.output.find("RESULT goodput_rps="), std::string::npos) << run.output;
}

TEST(BenchClusterE2eTest, EveryRequestAndTokenIsAccountedFor) {
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{{"--tp=1"}}};
  spec.decode = {NodeSpec{{"--tp=1"}}};
  const std::string http_port_file = ::testing::TempDir() + "/bench_e2e_router.http_port";
  std::remove(http_port_file.c_str());
  spec.router_flags = {"--http_port_file=" + http_port_file};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<std::string> common = {"--backend=grpc",
                                           absl::StrCat("--address=", (*cluster)->router_address()),
                                           "--token_id_range=3:259",
                                           "--prompt_len=uniform:4:60",
                                           "--output_len=uniform:1:12",
                                           "--seed=3",
                                           "--slo_ttft_ms=60000",
                                           "--slo_tpot_ms=60000"};

  std::vector<std::string> closed = common;
  closed.insert(closed.end(), {"--concurrency=4", "--num_requests=24"});
  const BenchRun c = RunBench(closed);
  ExpectAccounted(c, 24, RequestedTokens(3, "uniform:4:60", "uniform:1:12", 24), **cluster);
  EXPECT_EQ(c.json["report"]["good_requests"], 24);

  std::vector<std::string> open = common;
  open.insert(open.end(), {"--request_rate=20", "--max_concurrency=8", "--num_requests=16"});
  const BenchRun o = RunBench(open);
  ExpectAccounted(o, 16, RequestedTokens(3, "uniform:4:60", "uniform:1:12", 16), **cluster);
  EXPECT_EQ(o.json["settings"]["request_rate"], "20");

  // The same nodes without the router (what the router-overhead record compares against);
  // one-token requests take the ReleaseKv path.
  std::vector<std::string> direct = {"--backend=direct",
                                     "--prefill=" + (*cluster)->prefill_addresses()[0],
                                     "--decode=" + (*cluster)->decode_addresses()[0],
                                     "--token_id_range=3:259",
                                     "--prompt_len=uniform:4:60",
                                     "--output_len=uniform:1:12",
                                     "--seed=3",
                                     "--slo_ttft_ms=60000",
                                     "--concurrency=3",
                                     "--num_requests=18"};
  int64_t one_token = 0;
  {
    bench::RequestSourceOptions o;
    o.seed = 3;
    o.prompt_len = *bench::LengthDistribution::Parse("uniform:4:60");
    o.output_len = *bench::LengthDistribution::Parse("uniform:1:12");
    o.token_id_lo = 3;
    o.token_id_hi = 259;
    const bench::RequestSource source = *bench::RequestSource::Create(o);
    for (int64_t i = 0; i < 18; ++i) one_token += source.Make(i).max_tokens == 1 ? 1 : 0;
  }
  EXPECT_GT(one_token, 0) << "no one-token request: the ReleaseKv path is not exercised";
  const BenchRun d = RunBench(direct);
  ExpectAccounted(d, 18, RequestedTokens(3, "uniform:4:60", "uniform:1:12", 18), **cluster);

  // The router's OpenAI-compatible HTTP API, token-id prompts on /v1/completions (SSE).
  const std::string http_port = WaitForFile(http_port_file, absl::Seconds(30));
  ASSERT_FALSE(http_port.empty()) << "no " << http_port_file << "\n" << (*cluster)->LogTails();
  std::vector<std::string> http = common;
  http[0] = "--backend=openai";
  http[1] = "--base_url=http://127.0.0.1:" + http_port;
  http.insert(http.end(), {"--concurrency=3", "--num_requests=12"});
  const BenchRun h = RunBench(http);
  ExpectAccounted(h, 12, RequestedTokens(3, "uniform:4:60", "uniform:1:12", 12), **cluster);

  const absl::Status idle = (*cluster)->WaitIdle(absl::Seconds(15));
  EXPECT_TRUE(idle.ok()) << idle << "\n" << (*cluster)->LogTails();
}

TEST(BenchClusterE2eTest, RequestsTheClusterRejectsAreCountedAsFailedByCode) {
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{{"--tp=1"}}};
  spec.decode = {NodeSpec{{"--tp=1"}}};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // Token ids past the synthetic vocabulary (320): the router refuses every request.
  const BenchRun r =
      RunBench({"--backend=grpc", absl::StrCat("--address=", (*cluster)->router_address()),
                "--token_id_range=400:500", "--prompt_len=fixed:8", "--output_len=fixed:4",
                "--concurrency=2", "--num_requests=6"});
  EXPECT_EQ(r.exit_code, 1) << r.output;  // failures → exit code 1
  ASSERT_TRUE(r.json.is_object()) << r.output;
  EXPECT_EQ(r.json["report"]["requests_sent"], 6);
  EXPECT_EQ(r.json["report"]["requests_failed"], 6);
  EXPECT_EQ(r.json["report"]["failures_by_error"]["INVALID_ARGUMENT"], 6) << r.output;
}

}  // namespace
}  // namespace tandem::testing
