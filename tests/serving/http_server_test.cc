// HttpServer (serving/http_server.h) over loopback TCP: many concurrent SSE streams written from
// threads other than the handlers', a client that closes mid-stream (OnClientGone fires from the
// event loop with no write), the server's own 404/405/413, keep-alive and its 5-request cap,
// Stop waiting for a blocked handler, and an HTTPS round trip with a throwaway PKI.
#include "serving/http_server.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "tests/security/test_pki.h"

namespace tandem {
namespace {

constexpr absl::Duration kWait = absl::Seconds(20);
constexpr int kEvents = 20;

// A plain TCP client socket, closed on destruction.
class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~Client() { Close(); }
  bool connected() const { return connected_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool Send(absl::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads until `done(received)` holds, EOF, or the deadline; returns everything received.
  template <typename Done>
  std::string ReadUntil(Done done, absl::Duration timeout = kWait) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!done(received_) && !eof_) {
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[16384];
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        eof_ = true;
        break;
      }
      received_.append(buf, static_cast<size_t>(n));
    }
    return received_;
  }
  std::string ReadToEof() {
    return ReadUntil([](const std::string&) { return false; });
  }
  bool eof() const { return eof_; }
  void Forget() { received_.clear(); }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string received_;
};

bool HasWholeResponses(const std::string& s, int n) {
  // Responses here are Content-Length bodies ending in '\n'; count status lines with a body.
  int seen = 0;
  size_t at = 0;
  while ((at = s.find("HTTP/1.1 ", at)) != std::string::npos) {
    ++seen;
    ++at;
  }
  return seen >= n && absl::EndsWith(s, "\n");
}

// Sends `request` on a new connection; the one whole response (Content-Length body) it gets.
std::string OneResponse(int port, const std::string& request) {
  Client client(port);
  if (!client.Send(request)) return "";
  return client.ReadUntil([](const std::string& s) { return HasWholeResponses(s, 1); });
}

// Records on_response calls.
struct Responses {
  absl::Mutex mu;
  absl::CondVar changed;
  std::vector<std::pair<std::string, int>> seen ABSL_GUARDED_BY(mu);
  void Add(const std::string& route, int status) {
    absl::MutexLock lock(&mu);
    seen.emplace_back(route, status);
    changed.SignalAll();
  }
  // True once on_response(route, status) was called (bounded wait).
  bool WaitFor(const std::string& route, int status) {
    absl::MutexLock lock(&mu);
    const absl::Time deadline = absl::Now() + kWait;
    while (true) {
      for (const auto& s : seen) {
        if (s.first == route && s.second == status) return true;
      }
      if (changed.WaitWithDeadline(&mu, deadline)) return false;
    }
  }
};

std::string Request(const std::string& method, const std::string& path,
                    const std::string& extra_headers = "", const std::string& body = "") {
  return absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: test\r\n", extra_headers,
                      body.empty() ? "" : absl::StrCat("Content-Length: ", body.size(), "\r\n"),
                      "\r\n", body);
}

// A server with GET /hello, POST /echo and GET /stream (kEvents events written by a thread the
// handler starts, not the handler itself).
class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions options, std::vector<HttpRoute> extra = {}) {
    options.on_response = [this](const std::string& route, int status) {
      responses_.Add(route, status);
    };
    std::vector<HttpRoute> routes = {
        {"GET", "/hello", [](HttpExchange& ex) { ex.Respond(200, "text/plain", "hello\n"); }},
        {"POST", "/echo",
         [](HttpExchange& ex) {
           absl::StatusOr<std::string> body = ex.ReadBody(1 << 20);
           ex.Respond(200, "text/plain", body.ok() ? *body + "\n" : "?\n");
         }},
        {"GET", "/stream",
         [](HttpExchange& ex) {
           ASSERT_TRUE(ex.StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}}));
           std::thread writer([&ex] {
             for (int i = 0; i < kEvents; ++i) ex.WriteChunk(absl::StrCat("data: ", i, "\n\n"));
             ex.EndStream();
           });
           writer.join();
         }},
    };
    for (HttpRoute& r : extra) routes.push_back(std::move(r));
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start("127.0.0.1:0", options, std::move(routes));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // A handler that sends one event of a stream (`mid_stream`) or nothing, then writes nothing
  // more and waits for OnClientGone: only the event loop can see the client leave. The client
  // leaves once it got what was sent; the handler sees it within 2 s and its later write fails.
  void ClientGoneSeen(bool mid_stream) {
    struct Seen {
      absl::Notification gone, sent, done;
      std::atomic<bool> late_write_ok{true};
    };
    auto seen = std::make_shared<Seen>();  // outlives an early return of the test
    StartServer(HttpServerOptions(), {{"GET", "/wait", [seen, mid_stream](HttpExchange& ex) {
                                         ex.OnClientGone([seen] { seen->gone.Notify(); });
                                         if (mid_stream) {
                                           ex.StartStream(200, "text/event-stream");
                                           ex.WriteChunk("data: first\n\n");
                                         }
                                         seen->sent.Notify();
                                         if (seen->gone.WaitForNotificationWithTimeout(kWait)) {
                                           seen->late_write_ok =
                                               mid_stream ? ex.WriteChunk("data: late\n\n")
                                                          : ex.Respond(200, "text/plain", "late\n");
                                         }
                                         ex.OnClientGone(nullptr);
                                         seen->done.Notify();
                                       }}});
    Client client(server_->port());
    ASSERT_TRUE(client.Send(Request("GET", "/wait")));
    ASSERT_TRUE(seen->sent.WaitForNotificationWithTimeout(kWait));
    if (mid_stream) {
      const std::string first = client.ReadUntil(
          [](const std::string& s) { return absl::StrContains(s, "data: first\n\n"); });
      ASSERT_TRUE(absl::StrContains(first, "data: first")) << first;
    }
    const absl::Time closed = absl::Now();
    client.Close();
    ASSERT_TRUE(seen->done.WaitForNotificationWithTimeout(kWait));
    EXPECT_TRUE(seen->gone.HasBeenNotified());
    // Seen as it happens (the connection watch polled every 100 ms before).
    EXPECT_LT(absl::Now() - closed, absl::Seconds(2));
    EXPECT_FALSE(seen->late_write_ok.load());
    // Counted once its handler returned.
    EXPECT_TRUE(responses_.WaitFor("/wait", 200));
  }

  Responses responses_;
  std::unique_ptr<HttpServer> server_;
};

// Every event of a stream, in order, then the last chunk.
void ExpectWholeStream(const std::string& response) {
  ASSERT_TRUE(absl::StartsWith(response, "HTTP/1.1 200 OK\r\n")) << response;
  EXPECT_TRUE(absl::StrContains(response, "Transfer-Encoding: chunked\r\n")) << response;
  EXPECT_TRUE(absl::StrContains(response, "Cache-Control: no-cache\r\n")) << response;
  size_t at = 0;
  for (int i = 0; i < kEvents; ++i) {
    at = response.find(absl::StrCat("data: ", i, "\n\n"), at);
    ASSERT_NE(at, std::string::npos) << "event " << i << " in " << response;
  }
  EXPECT_TRUE(absl::EndsWith(response, "\r\n0\r\n\r\n")) << response;
}

TEST_F(HttpServerTest, ManyConcurrentStreamsWrittenFromOtherThreads) {
  HttpServerOptions options;
  options.threads = 300;
  StartServer(options);
  constexpr int kStreams = 200;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.push_back(std::make_unique<Client>(server_->port()));
    ASSERT_TRUE(clients.back()->connected());
    ASSERT_TRUE(clients.back()->Send(Request("GET", "/stream", "Connection: close\r\n")));
  }
  for (auto& client : clients) {
    const std::string response = client->ReadToEof();
    ExpectWholeStream(response);
    EXPECT_TRUE(absl::StrContains(response, "Connection: close\r\n"));
  }
  EXPECT_TRUE(responses_.WaitFor("/stream", 200));
}

TEST_F(HttpServerTest, AClientClosingMidStreamFiresOnClientGoneWithoutAWrite) {
  ClientGoneSeen(/*mid_stream=*/true);
}

TEST_F(HttpServerTest, AClientGoneBeforeTheResponseFiresOnClientGone) {
  ClientGoneSeen(/*mid_stream=*/false);
}

TEST_F(HttpServerTest, TheServersOwnAnswers404405413And500) {
  HttpServerOptions options;
  options.max_body_bytes = 16;
  options.body_too_large = [](size_t max) { return absl::StrCat("{\"limit\": ", max, "}"); };
  options.body_too_large_content_type = "application/json";
  StartServer(options, {{"GET", "/silent", [](HttpExchange&) {}}});
  const std::string not_found = OneResponse(server_->port(), Request("GET", "/nothing"));
  EXPECT_TRUE(absl::StartsWith(not_found, "HTTP/1.1 404 Not Found\r\n")) << not_found;
  EXPECT_TRUE(absl::EndsWith(not_found, "no route for GET /nothing\n")) << not_found;
  const std::string wrong = OneResponse(server_->port(), Request("POST", "/hello", "", "{}"));
  EXPECT_TRUE(absl::StartsWith(wrong, "HTTP/1.1 405 Method Not Allowed\r\n")) << wrong;
  EXPECT_TRUE(absl::StrContains(wrong, "Allow: GET\r\n")) << wrong;
  {
    // Refused by its Content-Length: the body is never sent (the client waits for a 100).
    Client client(server_->port());
    ASSERT_TRUE(
        client.Send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n"
                    "Expect: 100-continue\r\n\r\n"));
    const std::string r = client.ReadToEof();
    EXPECT_TRUE(absl::StartsWith(r, "HTTP/1.1 413 Payload Too Large\r\n")) << r;
    EXPECT_TRUE(absl::StrContains(r, "Content-Type: application/json\r\n")) << r;
    EXPECT_TRUE(absl::EndsWith(r, "{\"limit\": 16}")) << r;
    EXPECT_TRUE(client.eof());
  }
  const std::string silent = OneResponse(server_->port(), Request("GET", "/silent"));
  EXPECT_TRUE(absl::StartsWith(silent, "HTTP/1.1 500 Internal Server Error\r\n")) << silent;
  // Within the limit, the body reaches the handler.
  const std::string echo =
      OneResponse(server_->port(), Request("POST", "/echo", "", "0123456789abcdef"));
  EXPECT_TRUE(absl::EndsWith(echo, "\r\n\r\n0123456789abcdef\n")) << echo;
  EXPECT_TRUE(responses_.WaitFor("", 404));
  EXPECT_TRUE(responses_.WaitFor("/hello", 405));
  EXPECT_TRUE(responses_.WaitFor("/echo", 413));
  EXPECT_TRUE(responses_.WaitFor("/silent", 500));
  EXPECT_TRUE(responses_.WaitFor("/echo", 200));
}

TEST_F(HttpServerTest, KeepAliveServesFiveRequestsOnOneConnection) {
  HttpServerOptions options;
  StartServer(options);
  Client client(server_->port());
  // One after the other, then three pipelined in one write.
  for (int i = 1; i <= 2; ++i) {
    ASSERT_TRUE(client.Send(Request("GET", "/hello")));
    const std::string r =
        client.ReadUntil([i](const std::string& s) { return HasWholeResponses(s, i); });
    ASSERT_TRUE(HasWholeResponses(r, i)) << r;
    EXPECT_FALSE(client.eof());
  }
  ASSERT_TRUE(client.Send(Request("GET", "/hello") + Request("POST", "/echo", "", "abc") +
                          Request("GET", "/hello")));
  const std::string all = client.ReadToEof();  // the 5th response closes the connection
  int oks = 0;
  for (size_t at = 0; (at = all.find("HTTP/1.1 200 OK\r\n", at)) != std::string::npos; ++at) ++oks;
  EXPECT_EQ(oks, 5) << all;
  EXPECT_TRUE(absl::StrContains(all, "abc\n")) << all;
  const size_t last = all.rfind("HTTP/1.1 200 OK\r\n");
  EXPECT_TRUE(absl::StrContains(all.substr(last), "Connection: close\r\n")) << all;
  EXPECT_TRUE(absl::StrContains(all.substr(0, last), "Connection: keep-alive\r\n")) << all;
  EXPECT_TRUE(client.eof());
}

TEST_F(HttpServerTest, StopWaitsForABlockedHandlerAndWritesItsResponse) {
  absl::Notification entered;
  absl::Notification release;
  HttpServerOptions options;
  StartServer(options, {{"GET", "/blocked", [&](HttpExchange& ex) {
                           entered.Notify();
                           release.WaitForNotificationWithTimeout(kWait);
                           ex.Respond(200, "text/plain", "released\n");
                         }}});
  Client client(server_->port());
  ASSERT_TRUE(client.Send(Request("GET", "/blocked")));
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(kWait));
  absl::Notification stopped;
  std::thread stopper([&] {
    server_->Stop();
    stopped.Notify();
  });
  // Stop is still waiting while the handler blocks.
  EXPECT_FALSE(stopped.WaitForNotificationWithTimeout(absl::Milliseconds(300)));
  release.Notify();
  EXPECT_TRUE(stopped.WaitForNotificationWithTimeout(kWait));
  stopper.join();
  const std::string r = client.ReadToEof();
  EXPECT_TRUE(absl::EndsWith(r, "released\n")) << r;
  // No longer accepting.
  Client late(server_->port());
  EXPECT_FALSE(late.connected() && late.Send(Request("GET", "/hello")) &&
               absl::StrContains(late.ReadToEof(), "200 OK"));
}

TEST_F(HttpServerTest, AcceptingResumesAfterTheProcessRanOutOfDescriptors) {
  StartServer(HttpServerOptions());
  rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  // Every descriptor below the lowest free one is in use: with the limit just above it, the
  // client's socket takes the last one and the server's accept() fails with EMFILE.
  const int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(lowest_free) + 1;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  Client client(server_->port());
  const bool connected = client.connected();
  const bool sent = connected && client.Send(Request("GET", "/hello"));
  // Nothing is answered while the server cannot accept, and its loop does not spin on the
  // pending connection meanwhile (the client only polls: the process's CPU is the loop's).
  rusage before, after;
  ::getrusage(RUSAGE_SELF, &before);
  const std::string early = client.ReadUntil(
      [](const std::string& s) { return HasWholeResponses(s, 1); }, absl::Milliseconds(300));
  ::getrusage(RUSAGE_SELF, &after);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  const absl::Duration cpu =
      absl::DurationFromTimeval(after.ru_utime) + absl::DurationFromTimeval(after.ru_stime) -
      absl::DurationFromTimeval(before.ru_utime) - absl::DurationFromTimeval(before.ru_stime);
  EXPECT_LT(cpu, absl::Milliseconds(100));
  ASSERT_TRUE(connected);
  ASSERT_TRUE(sent);
  EXPECT_EQ(early, "");
  const std::string r =
      client.ReadUntil([](const std::string& s) { return HasWholeResponses(s, 1); });
  EXPECT_TRUE(absl::EndsWith(r, "hello\n")) << r;
}

size_t AppendTo(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

TEST_F(HttpServerTest, HttpsRoundTrip) {
  absl::StatusOr<testing::TestPki> pki = testing::MakeTestPki({"server"});
  ASSERT_TRUE(pki.ok()) << pki.status();
  HttpServerOptions bad;
  bad.tls_cert_file = pki->Cert("server");
  bad.tls_key_file = pki->stranger_key();
  EXPECT_EQ(HttpServer::Start("127.0.0.1:0", bad, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  HttpServerOptions options;
  options.tls_cert_file = pki->Cert("server");
  options.tls_key_file = pki->Key("server");
  StartServer(options);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  for (const char* path : {"/hello", "/stream"}) {
    CURL* curl = curl_easy_init();
    ASSERT_NE(curl, nullptr);
    std::string body;
    const std::string url = absl::StrCat("https://127.0.0.1:", server_->port(), path);
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_CAINFO, pki->ca.c_str());
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &AppendTo);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 20L);
    const CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(curl);
    ASSERT_EQ(rc, CURLE_OK) << curl_easy_strerror(rc);
    EXPECT_EQ(status, 200);
    if (std::string(path) == "/hello") {
      EXPECT_EQ(body, "hello\n");
    } else {
      EXPECT_TRUE(absl::StartsWith(body, "data: 0\n\n")) << body;
      EXPECT_TRUE(absl::EndsWith(body, absl::StrCat("data: ", kEvents - 1, "\n\n"))) << body;
    }
  }
  // Plain HTTP to the HTTPS port gets no HTTP answer.
  Client plain(server_->port());
  ASSERT_TRUE(plain.Send(Request("GET", "/hello")));
  EXPECT_FALSE(absl::StrContains(plain.ReadToEof(), "hello"));
}

}  // namespace
}  // namespace tandem
