// Metrics end to end: a real local cluster (router, prefill and decode processes) scraped by the
// real Prometheus server from Debian's `prometheus` package, started here on 127.0.0.1 with a
// generated config (1 s scrape interval) and a temporary storage directory. After requests go
// through the cluster, the counters must have moved by exactly what the requests imply, asked
// through Prometheus' HTTP query API (/api/v1/query). Also checks that every process wrote one
// log line per request carrying the router's request id.
//
// Every wait is bounded; the Prometheus process and the cluster are stopped and their files
// removed at the end (and the children die with the test through PR_SET_PDEATHSIG).
#include <curl/curl.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tandem/v1/prefill.grpc.pb.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/reference.h"

namespace tandem::testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

// Bound of every wait on Prometheus (start-up, scrapes landing in query results).
constexpr absl::Duration kPrometheusWait = absl::Seconds(60);
// Polling interval of an observed condition (never synchronisation by sleeping).
constexpr absl::Duration kPoll = absl::Milliseconds(250);

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

size_t AppendBody(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

struct HttpReply {
  long status = 0;
  std::string body;
};

// GET `url` (or POST `json_body` when given) with a 30 s bound. UNAVAILABLE when the connection
// fails.
absl::StatusOr<HttpReply> HttpGet(const std::string& url,
                                  const std::optional<std::string>& json_body = std::nullopt) {
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  HttpReply reply;
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(nullptr, curl_slist_free_all);
  if (json_body.has_value()) {
    headers.reset(curl_slist_append(nullptr, "Content-Type: application/json"));
    curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(curl.get(), CURLOPT_POSTFIELDS, json_body->c_str());
  }
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, 30000L);
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &reply.body);
  const CURLcode rc = curl_easy_perform(curl.get());
  if (rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": ", curl_easy_strerror(rc)));
  }
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &reply.status);
  return reply;
}

std::string UrlEscape(const std::string& s) {
  char* e = curl_easy_escape(nullptr, s.c_str(), static_cast<int>(s.size()));
  std::string out(e);
  curl_free(e);
  return out;
}

// `promtool check metrics` on `text`: "" when it passes, else its exit code and output.
std::string PromtoolProblems(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/exposition.txt";
  std::ofstream(path) << text;
  const std::string cmd = absl::StrCat(TANDEM_PROMTOOL_BIN, " check metrics < ", path, " 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "popen failed";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && out.empty()) return "";
  return absl::StrCat("promtool exit status ", status, ": ", out);
}

// A port free right now on 127.0.0.1 (Prometheus cannot report a port it picked itself).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Waits (bounded) for `path` to hold a port number, written by a process at start-up.
absl::StatusOr<int> WaitPortFile(const std::string& path, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const int port = std::atoi(ReadFile(path).c_str());
    if (port > 0) return port;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("no port in ", path));
}

// The Prometheus server, scraping `targets` (job name → "127.0.0.1:PORT") every second.
class PrometheusServer {
 public:
  static absl::StatusOr<std::unique_ptr<PrometheusServer>> Start(
      const std::string& dir, const std::map<std::string, std::string>& targets) {
    std::unique_ptr<PrometheusServer> p(new PrometheusServer());
    p->dir_ = dir;
    std::string config =
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n";
    for (const auto& [job, target] : targets) {
      absl::StrAppend(&config, "  - job_name: '", job, "'\n    static_configs:\n",
                      "      - targets: ['", target, "']\n");
    }
    const std::string config_path = dir + "/prometheus.yml";
    std::ofstream(config_path) << config;
    p->port_ = FreePort();
    if (p->port_ == 0) return absl::InternalError("no free port for Prometheus");
    p->log_ = dir + "/prometheus.log";
    std::vector<std::string> args = {
        TANDEM_PROMETHEUS_BIN,
        "--config.file=" + config_path,
        "--storage.tsdb.path=" + dir + "/data",
        absl::StrCat("--web.listen-address=127.0.0.1:", p->port_),
        "--log.level=warn",
    };
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    p->pid_ = fork();
    if (p->pid_ < 0) return absl::InternalError("fork failed");
    if (p->pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      FILE* log = std::fopen(p->log_.c_str(), "w");
      if (log != nullptr) {
        dup2(fileno(log), 1);
        dup2(fileno(log), 2);
      }
      execv(argv[0], argv.data());
      _exit(127);
    }
    const absl::Time deadline = absl::Now() + kPrometheusWait;
    while (absl::Now() < deadline) {
      absl::StatusOr<HttpReply> ready = HttpGet(p->url("/-/ready"));
      if (ready.ok() && ready->status == 200) return p;
      int wstatus = 0;
      if (waitpid(p->pid_, &wstatus, WNOHANG) == p->pid_) {
        p->pid_ = -1;
        return absl::InternalError(
            absl::StrCat("prometheus exited during start-up:\n", ReadFile(p->log_)));
      }
      absl::SleepFor(kPoll);
    }
    return absl::DeadlineExceededError(
        absl::StrCat("prometheus not ready in time:\n", ReadFile(p->log_)));
  }

  ~PrometheusServer() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      absl::SleepFor(absl::Milliseconds(50));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

  std::string url(const std::string& path) const {
    return absl::StrCat("http://127.0.0.1:", port_, path);
  }
  std::string log() const { return ReadFile(log_); }

  // The instant vector of `query` as (labels → value), through /api/v1/query.
  absl::StatusOr<std::map<std::map<std::string, std::string>, double>> Query(
      const std::string& query) const {
    absl::StatusOr<HttpReply> reply = HttpGet(url("/api/v1/query?query=" + UrlEscape(query)));
    if (!reply.ok()) return reply.status();
    if (reply->status != 200) {
      return absl::InternalError(
          absl::StrCat("query ", query, ": HTTP ", reply->status, " ", reply->body));
    }
    const nlohmann::json j =
        nlohmann::json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || j.value("status", "") != "success") {
      return absl::InternalError(absl::StrCat("query ", query, ": ", reply->body));
    }
    std::map<std::map<std::string, std::string>, double> out;
    for (const nlohmann::json& r : j["data"]["result"]) {
      std::map<std::string, std::string> labels;
      for (const auto& [k, v] : r["metric"].items()) labels[k] = v.get<std::string>();
      out[labels] = std::stod(r["value"][1].get<std::string>());
    }
    return out;
  }

 private:
  PrometheusServer() = default;
  std::string dir_;
  std::string log_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// Sum of the values `query` returns, once it returns exactly `want` (bounded wait). Returns the
// last sum seen otherwise, so the failure message shows how far it got.
double WaitForSum(const PrometheusServer& prom, const std::string& query, double want,
                  std::string* last_error) {
  const absl::Time deadline = absl::Now() + kPrometheusWait;
  double sum = -1;
  while (absl::Now() < deadline) {
    absl::StatusOr<std::map<std::map<std::string, std::string>, double>> r = prom.Query(query);
    if (r.ok() && !r->empty()) {
      sum = 0;
      for (const auto& [labels, v] : *r) sum += v;
      if (sum == want) return sum;
    } else if (!r.ok()) {
      *last_error = r.status().ToString();
    }
    absl::SleepFor(kPoll);
  }
  return sum;
}

class PrometheusE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tandem-prom-XXXXXX");
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    prometheus_.reset();
    cluster_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    curl_global_cleanup();
  }

  std::string dir_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<PrometheusServer> prometheus_;
};

TEST_F(PrometheusE2eTest, PrometheusScrapesEveryProcessAndTheCountersMove) {
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{{"--metrics_port_file=" + dir_ + "/prefill0.metrics_port"}}};
  spec.decode = {NodeSpec{{"--metrics_port_file=" + dir_ + "/decode0.metrics_port"}}};
  spec.router_flags = {"--http_port_file=" + dir_ + "/router.http_port"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cluster_ = *std::move(cluster);

  std::map<std::string, std::string> targets;
  absl::StatusOr<int> router_http = WaitPortFile(dir_ + "/router.http_port", absl::Seconds(10));
  ASSERT_TRUE(router_http.ok()) << router_http.status() << "\n" << cluster_->LogTails();
  const std::string router_target = absl::StrCat("127.0.0.1:", *router_http);
  targets["tandem-router"] = router_target;
  for (const char* node : {"prefill0", "decode0"}) {
    absl::StatusOr<int> port =
        WaitPortFile(absl::StrCat(dir_, "/", node, ".metrics_port"), absl::Seconds(10));
    ASSERT_TRUE(port.ok()) << port.status() << "\n" << cluster_->LogTails();
    const std::string target = absl::StrCat("127.0.0.1:", *port);
    // The endpoint answers before Prometheus is involved, with the exposition content type.
    absl::StatusOr<HttpReply> direct = HttpGet(absl::StrCat("http://", target, "/metrics"));
    ASSERT_TRUE(direct.ok()) << direct.status();
    EXPECT_EQ(direct->status, 200);
    EXPECT_THAT(direct->body, HasSubstr("# TYPE tandem_kv_blocks_free gauge"));
    targets[absl::StrCat("tandem-", node)] = target;
  }
  absl::StatusOr<std::unique_ptr<PrometheusServer>> prom = PrometheusServer::Start(dir_, targets);
  ASSERT_TRUE(prom.ok()) << prom.status();
  prometheus_ = *std::move(prom);

  constexpr int kRequests = 4;
  constexpr int kMaxTokens = 8;
  int64_t prompt_tokens = 0;
  std::mt19937 rng(11);
  for (int i = 0; i < kRequests; ++i) {
    v1::GenerateRequest req;
    const int len = 5 + 7 * i;
    for (int t = 0; t < len; ++t) req.mutable_token_ids()->add_ids(3 + rng() % 200);
    prompt_tokens += len;
    req.set_max_tokens(kMaxTokens);
    req.set_ignore_eos(true);
    req.set_request_id(absl::StrCat("prom-", i));
    const GenerateOutcome out = cluster_->Generate(req, absl::Seconds(60));
    ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << cluster_->LogTails();
    ASSERT_EQ(out.tokens.size(), static_cast<size_t>(kMaxTokens));
  }
  // One more through the OpenAI HTTP API: the router counts both front ends alike.
  {
    absl::StatusOr<HttpReply> models =
        HttpGet(absl::StrCat("http://", router_target, "/v1/models"));
    ASSERT_TRUE(models.ok()) << models.status();
    const nlohmann::json list = nlohmann::json::parse(models->body, nullptr, false);
    ASSERT_FALSE(list.is_discarded()) << models->body;
    nlohmann::json body = {{"model", list["data"][0]["id"]},
                           {"prompt", std::vector<int>{5, 6, 7, 8, 9, 10}},
                           {"max_tokens", kMaxTokens},
                           {"ignore_eos", true}};
    prompt_tokens += 6;
    absl::StatusOr<HttpReply> completion =
        HttpGet(absl::StrCat("http://", router_target, "/v1/completions"), body.dump());
    ASSERT_TRUE(completion.ok()) << completion.status();
    ASSERT_EQ(completion->status, 200) << completion->body;
  }
  constexpr int kAll = kRequests + 1;

  // What each process serves passes the Prometheus project's own linter.
  for (const auto& [job, target] : targets) {
    absl::StatusOr<HttpReply> text = HttpGet(absl::StrCat("http://", target, "/metrics"));
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(PromtoolProblems(dir_, text->body), "") << job << ":\n" << text->body;
  }

  std::string error;
  // Every target is up.
  EXPECT_EQ(WaitForSum(*prometheus_, "up", targets.size(), &error), targets.size())
      << error << "\n"
      << prometheus_->log();
  // The router saw every request succeed, with one first token and kMaxTokens - 1 gaps each.
  EXPECT_EQ(
      WaitForSum(*prometheus_,
                 "tandem_request_success_total{job=\"tandem-router\",finish_reason=\"length\"}",
                 kAll, &error),
      kAll)
      << error;
  EXPECT_EQ(WaitForSum(*prometheus_, "tandem_time_to_first_token_seconds_count", kAll, &error),
            kAll)
      << error;
  EXPECT_EQ(WaitForSum(*prometheus_, "tandem_inter_token_latency_seconds_count",
                       kAll * (kMaxTokens - 1), &error),
            kAll * (kMaxTokens - 1))
      << error;
  EXPECT_EQ(WaitForSum(*prometheus_, "tandem_e2e_request_latency_seconds_count", kAll, &error),
            kAll)
      << error;
  EXPECT_EQ(
      WaitForSum(*prometheus_, "tandem_num_requests_running{job=\"tandem-router\"}", 0, &error), 0)
      << error;
  // The decode node sampled every token but each request's first (sampled by the prefill).
  EXPECT_EQ(WaitForSum(*prometheus_, "tandem_generation_tokens_total{job=\"tandem-decode0\"}",
                       kAll * (kMaxTokens - 1), &error),
            kAll * (kMaxTokens - 1))
      << error;
  EXPECT_EQ(WaitForSum(*prometheus_, "tandem_prompt_tokens_total{job=\"tandem-prefill0\"}",
                       prompt_tokens, &error),
            prompt_tokens)
      << error;
  // Each request's KV was pulled from the prefill node and its lease released.
  const std::string peer = cluster_->prefill_addresses()[0];
  EXPECT_EQ(
      WaitForSum(*prometheus_,
                 absl::StrCat("tandem_kv_transfer_copies_total{peer=\"", peer, "\"} > bool 0"), 1,
                 &error),
      1)
      << error;
  EXPECT_EQ(WaitForSum(*prometheus_,
                       absl::StrCat("tandem_kv_transfer_bytes_total{peer=\"", peer, "\"} > bool 0"),
                       1, &error),
            1)
      << error;
  // The scrapes above landed after the requests: no pull failed, so no failure series exists.
  absl::StatusOr<std::map<std::map<std::string, std::string>, double>> failures =
      prometheus_->Query("tandem_kv_transfer_failures_total");
  ASSERT_TRUE(failures.ok()) << failures.status();
  EXPECT_TRUE(failures->empty());
  EXPECT_EQ(WaitForSum(*prometheus_, "tandem_kv_leases_released_total", kAll, &error), kAll)
      << error;
  EXPECT_EQ(WaitForSum(*prometheus_, "tandem_kv_leases_active", 0, &error), 0) << error;
  EXPECT_EQ(WaitForSum(*prometheus_, "tandem_prefix_cache_hits_total", 0, &error), 0) << error;
  // Both nodes report their KV pools: all blocks free again, none used.
  EXPECT_EQ(WaitForSum(*prometheus_, "tandem_kv_blocks_used", 0, &error), 0) << error;
  EXPECT_EQ(WaitForSum(*prometheus_, "count(tandem_kv_blocks_free > 0)", 2, &error), 2) << error;

  // A lease nobody releases expires on the prefill node; a decode node then handed the stale
  // handle fails its transfer (the lease did not hold) and counts it against that peer.
  auto prefill =
      v1::PrefillService::NewStub(grpc::CreateChannel(peer, grpc::InsecureChannelCredentials()));
  v1::PrefillRequest preq;
  preq.set_request_id("stale-lease");
  for (int t = 0; t < 20; ++t) preq.add_prompt_ids(3 + t);
  preq.set_max_new_tokens(4);
  preq.set_lease_ms(300);
  v1::PrefillResponse presp;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    const grpc::Status s = prefill->Prefill(&ctx, preq, &presp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(WaitForSum(*prometheus_, "tandem_kv_leases_expired_total", 1, &error), 1) << error;
  auto decode = v1::DecodeService::NewStub(
      grpc::CreateChannel(cluster_->decode_addresses()[0], grpc::InsecureChannelCredentials()));
  v1::DecodeRequest dreq;
  dreq.set_request_id("stale-lease");
  dreq.set_first_token(presp.first_token());
  *dreq.mutable_kv() = presp.kv();
  dreq.set_max_new_tokens(4);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    auto reader = decode->Decode(&ctx, dreq);
    v1::DecodeEvent ev;
    while (reader->Read(&ev)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::ABORTED);
  }
  EXPECT_EQ(
      WaitForSum(*prometheus_,
                 absl::StrCat("tandem_kv_transfer_failures_total{peer=\"", peer, "\"}"), 1, &error),
      1)
      << error;

  // One log line per request on every process, keyed by the router's request id (a direct call
  // without x-request-id metadata is logged under its own id).
  const std::string logs = cluster_->LogTails(40);
  for (int i = 0; i < kRequests; ++i) {
    const std::string id = absl::StrCat("request_id=prom-", i, " ");
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("tandem-router: request ", id, "outcome=OK")));
    // Nodes also log the id they were called with: the client's id with the router's nonce and
    // sequence number (router/generate_driver.cc NodeRequestId).
    EXPECT_THAT(
        logs, ContainsRegex(absl::StrCat("tandem-prefill: request ", id, "node_request_id=prom-", i,
                                         "#[0-9a-f]+-[0-9]+ outcome=OK")));
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("tandem-decode: request ", id)));
  }
  EXPECT_THAT(logs, HasSubstr("tandem-decode: request request_id=stale-lease peer=" + peer +
                              " outcome=ABORTED"));
}

}  // namespace
}  // namespace tandem::testing
