#include "tests/bench/fake_servers.h"

#include <arpa/inet.h>
#include <grpcpp/server_builder.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tandem/v1/router.grpc.pb.h"

namespace tandem::bench::testing {

Plan PlanFor(int64_t prompt_units) {
  Plan p;
  p.fail = prompt_units == kFailingLength;
  p.ttft = kTtftPerUnit * prompt_units;
  return p;
}

void InFlight::Enter() {
  absl::MutexLock lock(&mu_);
  max_ = std::max(max_, ++now_);
}
void InFlight::Leave() {
  absl::MutexLock lock(&mu_);
  --now_;
}
int InFlight::max() const {
  absl::MutexLock lock(&mu_);
  return max_;
}

// ---- FakeRouter --------------------------------------------------------------------------------

class FakeRouter::Service final : public v1::Router::Service {
 public:
  explicit Service(InFlight& in_flight) : in_flight_(in_flight) {}
  grpc::Status Generate(grpc::ServerContext*, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    in_flight_.Enter();
    const int64_t units =
        req->has_chat() ? req->chat().messages_size() : req->token_ids().ids_size();
    const Plan plan = PlanFor(units);
    grpc::Status status = grpc::Status::OK;
    if (plan.fail) {
      status = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "fake: no capacity");
    } else {
      absl::SleepFor(plan.ttft);
      for (int32_t i = 0; i < req->max_tokens(); ++i) {
        if (i > 0) absl::SleepFor(kItl);
        v1::GenerateResponse r;
        r.mutable_token()->set_id(100 + i);
        r.mutable_token()->set_text("t");
        r.mutable_token()->set_index(i);
        writer->Write(r);
      }
      v1::GenerateResponse fin;
      fin.mutable_final()->mutable_usage()->set_prompt_tokens(static_cast<int32_t>(units));
      fin.mutable_final()->mutable_usage()->set_completion_tokens(req->max_tokens());
      writer->Write(fin);
    }
    in_flight_.Leave();
    return status;
  }

 private:
  InFlight& in_flight_;
};

FakeRouter::FakeRouter() : service_(std::make_unique<Service>(in_flight_)) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  EXPECT_NE(server_, nullptr);
  address_ = absl::StrCat("127.0.0.1:", port);
}

FakeRouter::~FakeRouter() {
  if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
}

// ---- FakeOpenAi --------------------------------------------------------------------------------

namespace {

bool WriteAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads one HTTP request (headers + Content-Length body), bounded by a 10 s poll per read.
bool ReadRequest(int fd, std::string& request_line, std::string& body) {
  std::string buf;
  char chunk[4096];
  size_t header_end = std::string::npos;
  size_t content_length = 0;
  for (;;) {
    if (header_end != std::string::npos && buf.size() >= header_end + 4 + content_length) break;
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, 10000) <= 0) return false;
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) return false;
    buf.append(chunk, static_cast<size_t>(n));
    if (header_end == std::string::npos) {
      header_end = buf.find("\r\n\r\n");
      if (header_end == std::string::npos) continue;
      size_t pos = 0;
      while (pos < header_end) {
        size_t eol = buf.find("\r\n", pos);
        if (eol == std::string::npos || eol > header_end) eol = header_end;
        const std::string line = buf.substr(pos, eol - pos);
        pos = eol + 2;
        if (request_line.empty()) {
          request_line = line;
          continue;
        }
        const size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(c));
        if (name == "content-length") {
          size_t v = colon + 1;
          while (v < line.size() && line[v] == ' ') ++v;
          if (!absl::SimpleAtoi(line.substr(v), &content_length)) return false;
        }
      }
    }
  }
  body = buf.substr(header_end + 4, content_length);
  return true;
}

// Sends one SSE event in two writes split in the middle, so the client's parser sees events cut
// across reads.
bool SendEvent(int fd, const std::string& data) {
  const std::string ev = "data: " + data + "\n\n";
  const size_t half = ev.size() / 2;
  return WriteAll(fd, std::string_view(ev).substr(0, half)) &&
         WriteAll(fd, std::string_view(ev).substr(half));
}

}  // namespace

FakeOpenAi::FakeOpenAi() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(listen_fd_, 0);
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(listen_fd_, 128), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

FakeOpenAi::~FakeOpenAi() {
  stop_ = true;
  accept_thread_.join();
  std::vector<std::thread> conns;
  {
    absl::MutexLock lock(&mu_);
    conns.swap(connections_);
  }
  for (std::thread& t : conns) t.join();
  ::close(listen_fd_);
}

std::vector<nlohmann::json> FakeOpenAi::bodies() const {
  absl::MutexLock lock(&mu_);
  return bodies_;
}

void FakeOpenAi::AcceptLoop() {
  while (!stop_) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 50) <= 0) continue;  // 50 ms: how soon the destructor is noticed
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    absl::MutexLock lock(&mu_);
    connections_.emplace_back([this, fd] {
      Serve(fd);
      ::close(fd);
    });
  }
}

void FakeOpenAi::Serve(int fd) {
  std::string request_line, body;
  if (!ReadRequest(fd, request_line, body)) return;
  in_flight_.Enter();
  const bool chat = absl::StrContains(request_line, "/v1/chat/completions");
  const bool completions = absl::StrContains(request_line, "POST /v1/completions ");
  const nlohmann::json req = nlohmann::json::parse(body, nullptr, false);
  {
    absl::MutexLock lock(&mu_);
    bodies_.push_back(req);
  }
  // Each path leaves the in-flight count BEFORE its last write: once the client has read that
  // write it may start its next request, which must not find this one still counted.
  if (!chat && !completions) {
    in_flight_.Leave();
    WriteAll(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    return;
  }
  const int64_t units =
      chat ? static_cast<int64_t>(req["messages"].size())
           : (req["prompt"].is_array() ? static_cast<int64_t>(req["prompt"].size()) : 1);
  const Plan plan = PlanFor(units);
  if (plan.fail) {
    const std::string err = R"({"error":{"message":"fake: no capacity","code":503}})";
    in_flight_.Leave();
    WriteAll(
        fd, absl::StrCat("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json",
                         "\r\nContent-Length: ", err.size(), "\r\nConnection: close\r\n\r\n", err));
    return;
  }
  WriteAll(fd,
           "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
           "Connection: close\r\n\r\n");
  if (chat) {  // a role-only first delta, as OpenAI and vLLM send: not a token
    SendEvent(fd, R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})");
  }
  WriteAll(fd, ": keep-alive comment\n\n");
  absl::SleepFor(plan.ttft);
  const int max_tokens = req["max_tokens"].get<int>();
  for (int i = 0; i < max_tokens; ++i) {
    if (i > 0) absl::SleepFor(kItl);
    const std::string piece = chat ? R"({"choices":[{"index":0,"delta":{"content":"t"}}]})"
                                   : R"({"choices":[{"index":0,"text":"t"}]})";
    if (!SendEvent(fd, piece)) break;
  }
  SendEvent(fd, absl::StrCat(R"({"choices":[],"usage":{"prompt_tokens":)", units,
                             R"(,"completion_tokens":)", max_tokens, "}}"));
  in_flight_.Leave();
  SendEvent(fd, "[DONE]");
}

}  // namespace tandem::bench::testing
