// Provenance and strict mode (docs/router.md#provenance-and-strict-mode) through real processes
// and the real model (labels e2e + model): prefill tp 3 → decode tp 1, a mismatched P/D layout
// (the model has 9 query heads: tp 1, 3 or 9). The HTTP header x-tandem-provenance and the
// response's `tandem` object, and the gRPC trailing metadata, name both nodes and layouts with the
// KV bytes moved and digests verified; a decode node killed mid-answer shows as one resume, and
// in strict mode the same kill fails the request with ABORTED naming the refused resume.
#include <curl/curl.h>
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/local_cluster.h"
#include "tests/model/format/model_env.h"

namespace tandem::testing {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

struct HttpReply {
  long status = 0;
  std::string body;
  std::string provenance;  // the x-tandem-provenance header
};

HttpReply Post(int port, const std::string& path, const std::string& json) {
  HttpReply reply;
  CURL* curl = curl_easy_init();
  const std::string url = absl::StrCat("http://127.0.0.1:", port, path);
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 120000L);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char* data, size_t, size_t n, void* p) -> size_t {
        static_cast<std::string*>(p)->append(data, n);
        return n;
      });
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &reply.provenance);
  curl_easy_setopt(
      curl, CURLOPT_HEADERFUNCTION, +[](char* data, size_t, size_t n, void* p) -> size_t {
        absl::string_view line(data, n);
        if (absl::ConsumePrefix(&line, "x-tandem-provenance:")) {
          *static_cast<std::string*>(p) = std::string(absl::StripAsciiWhitespace(line));
        }
        return n;
      });
  if (curl_easy_perform(curl) == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return reply;
}

// The JSON of every `data:` event but [DONE].
std::vector<Json> Events(const std::string& body) {
  std::vector<Json> events;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::ConsumePrefix(&line, "data: ") || line == "[DONE]") continue;
    events.push_back(Json::parse(line));
  }
  return events;
}

struct Traced {
  grpc::Status status;
  int tokens = 0;
  Json provenance;  // the trailing metadata's; null without one
};

// One Generate through the router's gRPC API; `on_token(index)` runs as each token arrives.
Traced GrpcGenerate(v1::Router::StubInterface* stub, const v1::GenerateRequest& request,
                    const std::function<void(int32_t)>& on_token = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(2)));
  Traced out;
  std::unique_ptr<grpc::ClientReaderInterface<v1::GenerateResponse>> reader =
      stub->Generate(&ctx, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (!response.has_token()) continue;
    ++out.tokens;
    if (on_token) on_token(response.token().index());
  }
  out.status = reader->Finish();
  const auto& trailers = ctx.GetServerTrailingMetadata();
  if (const auto it = trailers.find("x-tandem-provenance"); it != trailers.end()) {
    out.provenance = Json::parse(std::string(it->second.data(), it->second.size()));
  }
  return out;
}

v1::GenerateRequest TextRequest(int32_t max_tokens, bool strict) {
  v1::GenerateRequest r;
  r.set_text("The capital of France is");
  r.set_max_tokens(max_tokens);
  r.set_ignore_eos(true);
  r.set_strict(strict);
  return r;
}

class ProvenanceE2eTest : public RealModelTest {
 protected:
  void SetUp() override {
    RealModelTest::SetUp();
    if (IsSkipped()) return;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tandem-prov-XXXXXX");
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    cluster_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
    curl_global_cleanup();
  }

  // A node the cluster started (the router names nodes by these addresses).
  static bool Contains(const std::vector<std::string>& addresses, const Json& node) {
    return node.is_string() && std::find(addresses.begin(), addresses.end(),
                                         node.get<std::string>()) != addresses.end();
  }

  // The final provenance of a request served prefill tp 3 → decode tp 1 without failures.
  void ExpectServedOnce(const Json& p) {
    ASSERT_TRUE(p.is_object()) << p;
    EXPECT_EQ(p["final"], true) << p;
    EXPECT_EQ(p["mode"], "disaggregated");
    ASSERT_EQ(p["prefill"].size(), 1u) << p;
    EXPECT_EQ(p["prefill"][0]["node"], cluster_->prefill_addresses()[0]);
    EXPECT_EQ(p["prefill"][0]["layout"], "tp3 block16");
    ASSERT_EQ(p["decode"].size(), 1u) << p;
    EXPECT_TRUE(Contains(cluster_->decode_addresses(), p["decode"][0]["node"])) << p;
    EXPECT_EQ(p["decode"][0]["layout"], "tp1 block16");
    EXPECT_EQ(p["decode"][0]["digests_verified"], true);
    EXPECT_GT(p["kv_bytes"].get<int64_t>(), 0);
    EXPECT_EQ(p["kv_bytes"], p["decode"][0]["kv_bytes"]);
    EXPECT_EQ(p["digests_verified"], true);
    EXPECT_EQ(p["retries"], 0);
    EXPECT_EQ(p["resumes"], 0);
  }

  std::string dir_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(ProvenanceE2eTest, MismatchedLayoutsAreNamedAndStrictModeRefusesAResume) {
  ClusterSpec spec;
  spec.model_path = ModelPath();
  spec.prefill = {NodeSpec{{"--tp=3", "--kv_budget_mb=64"}}};
  for (int i = 0; i < 3; ++i) spec.decode.push_back(NodeSpec{{"--tp=1", "--kv_budget_mb=64"}});
  spec.router_flags = {"--http_port_file=" + dir_ + "/http_port"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster =
      LocalCluster::Start(spec, absl::Minutes(4));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  cluster_ = *std::move(cluster);
  int http_port = 0;
  const absl::Time port_by = absl::Now() + absl::Seconds(10);
  while (http_port <= 0 && absl::Now() < port_by) {
    std::ifstream in(dir_ + "/http_port");
    if (!(in >> http_port)) absl::SleepFor(absl::Milliseconds(50));  // polling a file
  }
  ASSERT_GT(http_port, 0) << cluster_->LogTails();

  // HTTP, whole response: the header and the body's tandem object carry the final provenance.
  const HttpReply whole = Post(
      http_port, "/v1/completions",
      R"({"prompt": "The capital of France is", "max_tokens": 6, "tandem": {"provenance": true}})");
  ASSERT_EQ(whole.status, 200) << whole.body;
  ASSERT_FALSE(whole.provenance.empty());
  const Json header = Json::parse(whole.provenance);
  ExpectServedOnce(header);
  EXPECT_EQ(Json::parse(whole.body)["tandem"]["provenance"], header);

  // HTTP stream: the header has what was known at the first token (the prefill's), the usage
  // chunk the final provenance.
  const HttpReply stream =
      Post(http_port, "/v1/completions",
           R"({"prompt": "The capital of France is", "max_tokens": 6, "stream": true,
               "stream_options": {"include_usage": true}, "tandem": {"provenance": true}})");
  ASSERT_EQ(stream.status, 200) << stream.body;
  const Json first = Json::parse(stream.provenance);
  EXPECT_EQ(first["final"], false);
  ASSERT_EQ(first["prefill"].size(), 1u) << first;
  EXPECT_EQ(first["prefill"][0]["layout"], "tp3 block16");
  const std::vector<Json> events = Events(stream.body);
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.back().contains("usage"));
  ExpectServedOnce(events.back()["tandem"]["provenance"]);

  // gRPC: the trailing metadata, without asking.
  const Traced plain = GrpcGenerate(cluster_->router_stub(0), TextRequest(6, false));
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
  ExpectServedOnce(plain.provenance);

  // The decode node serving the answer is killed mid-stream: one resume, on another node.
  constexpr int32_t kTokens = 40;
  int killed = 0;
  auto kill_at_4 = [&](int32_t index) {
    if (index != 4 || killed > 0) return;
    absl::StatusOr<int> n = cluster_->KillRunningDecodeNodes();
    ASSERT_TRUE(n.ok()) << n.status();
    killed = *n;
  };
  const Traced resumed =
      GrpcGenerate(cluster_->router_stub(0), TextRequest(kTokens, false), kill_at_4);
  ASSERT_EQ(killed, 1) << "no decode node was running the request at token 4";
  ASSERT_TRUE(resumed.status.ok()) << resumed.status.error_message() << cluster_->LogTails();
  EXPECT_EQ(resumed.tokens, kTokens);
  const Json& r = resumed.provenance;
  EXPECT_EQ(r["resumes"], 1) << r;
  EXPECT_EQ(r["retries"], 1);
  ASSERT_EQ(r["failures"].size(), 1u) << r;
  EXPECT_EQ(r["failures"][0]["recovery"], "resume");
  ASSERT_EQ(r["decode"].size(), 2u) << r;
  EXPECT_EQ(r["failures"][0]["node"], r["decode"][0]["node"]);
  EXPECT_NE(r["decode"][0]["node"], r["decode"][1]["node"]);
  EXPECT_EQ(r["digests_verified"], true);
  std::printf("resumed: %s\n", r.dump().c_str());

  // Strict mode: the same kill fails the request, naming the refused resume.
  killed = 0;
  const Traced strict =
      GrpcGenerate(cluster_->router_stub(0), TextRequest(kTokens, true), kill_at_4);
  ASSERT_EQ(killed, 1) << "no decode node was running the strict request at token 4";
  EXPECT_EQ(strict.status.error_code(), grpc::StatusCode::ABORTED) << strict.status.error_message();
  EXPECT_THAT(strict.status.error_message(),
              HasSubstr("strict mode: resuming on another decode node (resume) refused after: "
                        "decode node "));
  EXPECT_LT(strict.tokens, kTokens);
  EXPECT_EQ(strict.provenance["strict"], true);
  EXPECT_EQ(strict.provenance["refused"], "resume");
  EXPECT_EQ(strict.provenance["resumes"], 0);

  const absl::Status idle = cluster_->WaitIdle(absl::Seconds(20));
  EXPECT_TRUE(idle.ok()) << idle << "\n" << cluster_->LogTails();
}

}  // namespace
}  // namespace tandem::testing

int main(int argc, char** argv) { return tandem::testing::RunModelTests(argc, argv); }
