// Security end to end (docs/security.md), with real tandem-router / tandem-prefill /
// tandem-decode processes on 127.0.0.1 and a throwaway CA made by the openssl command line:
//
// * a mutual-TLS cluster with API keys answers a prompt through gRPC and HTTPS with exactly the
//   tokens of the single-process reference (what the plaintext clusters are held to);
// * a node refuses a client without a certificate, with another CA's certificate, or in
//   plaintext, and serves nothing to it; the same call with the cluster's certificate works;
// * the router refuses Generate without (or with a wrong) API key with UNAUTHENTICATED and every
//   HTTP endpoint but /health with 401, and nothing reaches the nodes;
// * an HTTP body over --http_max_body_mb gets 413 with an OpenAI error naming the limit;
// * a decode node with --max_queued_requests=1 refuses a second waiting Decode call with
//   RESOURCE_EXHAUSTED (the first one waits on a fake prefill's handshake, held by the test).
#include <curl/curl.h>
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "serving/client_channel.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tandem/v1/prefill.grpc.pb.h"
#include "tests/e2e/local_cluster.h"
#include "tests/e2e/reference.h"
#include "tests/security/test_pki.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kKey[] = "sk-tandem-test-2";

struct HttpReply {
  CURLcode code = CURLE_OK;
  long status = 0;
  std::string body;
  std::string headers;
};

// One HTTPS (or HTTP) request with libcurl; `ca` verifies the server, `auth` is the
// Authorization header ("" = none), `body` makes it a POST.
HttpReply Request(const std::string& url, const std::string& ca, const std::string& auth,
                  const std::string* body = nullptr) {
  HttpReply reply;
  CURL* curl = curl_easy_init();
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  if (!auth.empty()) headers = curl_slist_append(headers, ("Authorization: " + auth).c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (!ca.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, ca.c_str());
  if (body != nullptr) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(body->size()));
  }
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 30000L);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char* data, size_t, size_t n, void* out) -> size_t {
        static_cast<std::string*>(out)->append(data, n);
        return n;
      });
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &reply.headers);
  curl_easy_setopt(
      curl, CURLOPT_HEADERFUNCTION, +[](char* data, size_t, size_t n, void* out) -> size_t {
        static_cast<std::string*>(out)->append(data, n);
        return n;
      });
  reply.code = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return reply;
}

std::shared_ptr<grpc::ChannelCredentials> Tls(const TestPki& pki, const std::string& name) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ReadTextFile(pki.ca);
  if (!name.empty()) {
    o.pem_cert_chain = ReadTextFile(pki.Cert(name));
    o.pem_private_key = ReadTextFile(pki.Key(name));
  }
  return grpc::SslCredentials(o);
}

std::vector<std::string> TlsFlags(const TestPki& pki, const std::string& name) {
  return {"--tls_cert=" + pki.Cert(name), "--tls_key=" + pki.Key(name), "--tls_ca=" + pki.ca};
}

int CountRequestLines(const std::string& log) {
  int n = 0;
  for (size_t pos = log.find(": request request_id="); pos != std::string::npos;
       pos = log.find(": request request_id=", pos + 1)) {
    ++n;
  }
  return n;
}

class TlsClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    absl::StatusOr<TestPki> pki = MakeTestPki({"router", "prefill", "decode", "client"});
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = new TestPki(*std::move(pki));
    const std::string keys = pki_->dir + "/api_keys.txt";
    std::ofstream(keys) << "# keys of the security test\nsk-tandem-test-1\n" << kKey << "\n";
    ClusterSpec spec;
    spec.model_path = SyntheticModelPath();
    spec.prefill = {NodeSpec{TlsFlags(*pki_, "prefill")}};
    spec.decode = {NodeSpec{TlsFlags(*pki_, "decode")}};
    spec.router_flags = TlsFlags(*pki_, "router");
    for (const std::string& f :
         {"--api_keys_file=" + keys, std::string("--http_listen=127.0.0.1:0"),
          "--http_port_file=" + pki_->dir + "/router.http_port",
          std::string("--http_max_body_mb=1")}) {
      spec.router_flags.push_back(f);
    }
    // The test's own channels: the cluster's CA and the client certificate (ClusterStatus).
    spec.credentials = Tls(*pki_, "client");
    spec.api_key = kKey;
    absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
    http_ = absl::StrCat("https://127.0.0.1:",
                         std::atoi(ReadTextFile(pki_->dir + "/router.http_port").c_str()));
  }
  static void TearDownTestSuite() {
    delete cluster_;
    delete pki_;
    curl_global_cleanup();
  }

  static TestPki* pki_;
  static LocalCluster* cluster_;
  static std::string http_;
};
TestPki* TlsClusterTest::pki_ = nullptr;
LocalCluster* TlsClusterTest::cluster_ = nullptr;
std::string TlsClusterTest::http_;

TEST_F(TlsClusterTest, AnswersOverGrpcAndHttpsWithTheReferenceTokens) {
  ASSERT_NE(cluster_, nullptr);
  const std::vector<int32_t> prompt = RandomPrompt(24, 11);
  const std::vector<int32_t> reference =
      ReferenceGreedy(SyntheticModelPath(), {prompt}, /*max_tokens=*/8)[0];
  const GenerateOutcome out = cluster_->Generate(IdsRequest(prompt, 8), absl::Seconds(60));
  ASSERT_TRUE(out.status.ok()) << out.status.error_message() << "\n" << cluster_->LogTails();
  EXPECT_EQ(out.tokens, reference);

  const std::string body =
      Json{{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}}.dump();
  const HttpReply reply =
      Request(http_ + "/v1/completions", pki_->ca, absl::StrCat("Bearer ", kKey), &body);
  ASSERT_EQ(reply.code, CURLE_OK) << curl_easy_strerror(reply.code);
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json json = Json::parse(reply.body);
  EXPECT_EQ(json["usage"]["completion_tokens"], 8);
  EXPECT_EQ(json["choices"][0]["text"], out.text);  // the same tokens, rendered

  // Plain HTTP on the HTTPS port gets no answer from the API.
  const HttpReply plain =
      Request("http://127.0.0.1:" + http_.substr(http_.rfind(':') + 1) + "/v1/models", "",
              absl::StrCat("Bearer ", kKey));
  EXPECT_NE(plain.status, 200) << plain.body;
}

TEST_F(TlsClusterTest, ANodeRefusesClientsWithoutTheClusterCertificate) {
  ASSERT_NE(cluster_, nullptr);
  const std::string prefill = cluster_->prefill_addresses()[0];
  const int served_before = CountRequestLines(cluster_->Log("prefill", 0));
  v1::PrefillRequest req;
  req.set_request_id("intruder");
  for (int32_t t : RandomPrompt(8, 3)) req.add_prompt_ids(t);
  req.set_max_new_tokens(2);
  struct Case {
    const char* what;
    std::shared_ptr<grpc::ChannelCredentials> credentials;
  };
  grpc::SslCredentialsOptions stranger;
  stranger.pem_root_certs = ReadTextFile(pki_->ca);
  stranger.pem_cert_chain = ReadTextFile(pki_->stranger_cert());
  stranger.pem_private_key = ReadTextFile(pki_->stranger_key());
  for (const Case& c : {Case{"TLS without a client certificate", Tls(*pki_, "")},
                        Case{"a certificate of another CA", grpc::SslCredentials(stranger)},
                        Case{"plaintext", grpc::InsecureChannelCredentials()}}) {
    SCOPED_TRACE(c.what);
    auto stub = v1::PrefillService::NewStub(grpc::CreateChannel(prefill, c.credentials));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::PrefillResponse resp;
    const grpc::Status s = stub->Prefill(&ctx, req, &resp);
    // The handshake fails: gRPC reports the connection as unavailable, nothing is served.
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
    EXPECT_FALSE(resp.has_kv());
  }
  EXPECT_EQ(CountRequestLines(cluster_->Log("prefill", 0)), served_before);

  // The same call with the cluster's certificate is served (and its KV released again).
  auto stub = v1::PrefillService::NewStub(grpc::CreateChannel(prefill, Tls(*pki_, "client")));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  v1::PrefillResponse resp;
  const grpc::Status s = stub->Prefill(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::ReleaseKvRequest rel;
  rel.set_request_id("intruder");
  rel.set_epoch(resp.kv().epoch());
  rel.set_generation(resp.kv().generation());
  grpc::ClientContext rel_ctx;
  rel_ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::ReleaseKvResponse released;
  EXPECT_TRUE(stub->ReleaseKv(&rel_ctx, rel, &released).ok());
  EXPECT_TRUE(cluster_->WaitIdle(absl::Seconds(30)).ok());
}

TEST_F(TlsClusterTest, TheRouterRefusesRequestsWithoutAValidApiKey) {
  ASSERT_NE(cluster_, nullptr);
  const int prefills_before = CountRequestLines(cluster_->Log("prefill", 0));
  const int router_before = CountRequestLines(cluster_->Log("router", 0));
  // gRPC: TLS that verifies the router, no client certificate (a public client).
  for (const std::string key : {"", "sk-wrong", "sk-tandem-test-"}) {
    SCOPED_TRACE(key);
    auto router =
        v1::Router::NewStub(CreateClientChannel(cluster_->router_address(), Tls(*pki_, ""), key));
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    auto reader = router->Generate(&ctx, IdsRequest(RandomPrompt(8, 4), 4));
    v1::GenerateResponse resp;
    EXPECT_FALSE(reader->Read(&resp));
    const grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("API key"));
    grpc::ClientContext status_ctx;
    status_ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::ClusterStatusResponse fleet;
    EXPECT_EQ(router->ClusterStatus(&status_ctx, v1::ClusterStatusRequest(), &fleet).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  // HTTP: every endpoint but /health.
  const std::string body = R"({"prompt": "hello", "max_tokens": 4})";
  for (const std::string auth : {"", "Bearer sk-wrong", "Basic c2stdGFuZGVtLXRlc3QtMg=="}) {
    SCOPED_TRACE(auth);
    const HttpReply post = Request(http_ + "/v1/completions", pki_->ca, auth, &body);
    EXPECT_EQ(post.status, 401) << post.body;
    const Json error = Json::parse(post.body)["error"];
    // docs/router.md's rule for every error object: code = the HTTP status.
    EXPECT_EQ(error["code"], 401);
    EXPECT_EQ(error["type"], "authentication_error");
    EXPECT_THAT(post.headers, HasSubstr("WWW-Authenticate: Bearer"));
    for (const char* path : {"/v1/models", "/metrics"}) {
      EXPECT_EQ(Request(http_ + path, pki_->ca, auth).status, 401) << path;
    }
    EXPECT_EQ(Request(http_ + "/health", pki_->ca, auth).status, 200);
  }
  // Nothing was served: no request line on the router or the prefill node.
  EXPECT_EQ(CountRequestLines(cluster_->Log("router", 0)), router_before);
  EXPECT_EQ(CountRequestLines(cluster_->Log("prefill", 0)), prefills_before);
  // With the key, /v1/models and /metrics answer.
  EXPECT_EQ(Request(http_ + "/v1/models", pki_->ca, absl::StrCat("Bearer ", kKey)).status, 200);
  EXPECT_EQ(Request(http_ + "/metrics", pki_->ca, absl::StrCat("Bearer ", kKey)).status, 200);
}

TEST_F(TlsClusterTest, ABodyOverTheLimitIs413NamingIt) {
  ASSERT_NE(cluster_, nullptr);
  const std::string body = R"({"prompt": ")" + std::string(2 << 20, 'a') + R"("})";
  const HttpReply reply =
      Request(http_ + "/v1/completions", pki_->ca, absl::StrCat("Bearer ", kKey), &body);
  EXPECT_EQ(reply.status, 413) << reply.body;
  const Json error = Json::parse(reply.body)["error"];
  EXPECT_THAT(error["message"].get<std::string>(),
              HasSubstr("exceeds the limit of 1048576 bytes (--http_max_body_mb)"));
  EXPECT_EQ(error["code"], 413);
}

// A prefill service whose GetTransferMetadata holds every call until released (bounded).
class HeldPrefill final : public v1::PrefillService::Service {
 public:
  HeldPrefill() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~HeldPrefill() override {
    Release();
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  bool WaitForCalls(int n, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    const auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    if (!release_.HasBeenNotified()) release_.Notify();
  }

  grpc::Status GetTransferMetadata(grpc::ServerContext*, const v1::GetTransferMetadataRequest*,
                                   v1::TransferMetadata*) override {
    {
      absl::MutexLock lock(&mu_);
      ++calls_;
    }
    release_.WaitForNotificationWithTimeout(absl::Seconds(60));
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "held prefill released");
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification release_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST(NodeQueueLimitTest, ADecodeNodeRefusesCallsBeyondItsQueueLimit) {
  ClusterSpec spec;
  spec.model_path = SyntheticModelPath();
  spec.prefill = {NodeSpec{}};
  spec.decode = {NodeSpec{{"--max_queued_requests=1", "--rpc_timeout_ms=60000"}}};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(spec);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // A real KV handle from the prefill node, redirected to a prefill that holds the handshake:
  // the decode call then waits (admitted, not running) for as long as the test wants.
  auto prefill = v1::PrefillService::NewStub(
      grpc::CreateChannel((*cluster)->prefill_addresses()[0], grpc::InsecureChannelCredentials()));
  v1::PrefillRequest req;
  req.set_request_id("queued");
  for (int32_t t : RandomPrompt(16, 6)) req.add_prompt_ids(t);
  req.set_max_new_tokens(4);
  req.set_lease_ms(60000);
  v1::PrefillResponse prefilled;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    ASSERT_TRUE(prefill->Prefill(&ctx, req, &prefilled).ok());
  }
  HeldPrefill held;
  v1::DecodeRequest decode_req;
  decode_req.set_request_id("queued");
  decode_req.set_first_token(prefilled.first_token());
  *decode_req.mutable_kv() = prefilled.kv();
  decode_req.mutable_kv()->set_prefill_address(held.address());
  decode_req.set_max_new_tokens(4);
  decode_req.set_next_step(1);
  auto decode = v1::DecodeService::NewStub(
      grpc::CreateChannel((*cluster)->decode_addresses()[0], grpc::InsecureChannelCredentials()));
  grpc::ClientContext first_ctx;
  first_ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  auto first = decode->Decode(&first_ctx, decode_req);
  ASSERT_TRUE(held.WaitForCalls(1, absl::Seconds(30))) << (*cluster)->LogTails();

  grpc::ClientContext second_ctx;
  second_ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  decode_req.set_request_id("refused");
  auto second = decode->Decode(&second_ctx, decode_req);
  v1::DecodeEvent event;
  EXPECT_FALSE(second->Read(&event));
  const grpc::Status refused = second->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("limit 1 (--max_queued_requests)"));
  EXPECT_EQ(held.WaitForCalls(2, absl::Milliseconds(200)), false);  // it never got that far

  held.Release();
  EXPECT_FALSE(first->Read(&event));
  EXPECT_FALSE(first->Finish().ok());  // the held handshake failed
  v1::ReleaseKvRequest rel;
  rel.set_request_id("queued");
  rel.set_epoch(prefilled.kv().epoch());
  rel.set_generation(prefilled.kv().generation());
  grpc::ClientContext rel_ctx;
  rel_ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  v1::ReleaseKvResponse released;
  EXPECT_TRUE(prefill->ReleaseKv(&rel_ctx, rel, &released).ok());
  EXPECT_TRUE((*cluster)->WaitIdle(absl::Seconds(30)).ok());
}

}  // namespace
}  // namespace tandem::testing
