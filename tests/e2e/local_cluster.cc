#include "tests/e2e/local_cluster.h"

#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "serving/client_channel.h"
#include "tandem/v1/decode.grpc.pb.h"
#include "tandem/v1/prefill.grpc.pb.h"

namespace tandem::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Tail(const std::string& text, int lines) {
  size_t pos = text.size();
  for (int i = 0; i <= lines && pos != std::string::npos && pos > 0; ++i) {
    pos = text.rfind('\n', pos - 1);
  }
  return pos == std::string::npos || text.empty() ? text : text.substr(pos + 1);
}

// How often readiness is re-checked while waiting for a process (bounded by the deadline).
constexpr absl::Duration kPoll = absl::Milliseconds(50);

// Process names: "router" (the first, as before replicas existed), "router1", ...
std::string RouterName(int index) { return index == 0 ? "router" : absl::StrCat("router", index); }
std::string ProcessName(const std::string& role, int index) {
  return role == "router" ? RouterName(index) : absl::StrCat(role, index);
}
bool IsRouter(const std::string& name) { return name.rfind("router", 0) == 0; }

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(const ClusterSpec& spec,
                                                                  absl::Duration timeout) {
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tandem-e2e-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  c->dir_ = templ;
  const absl::Time deadline = absl::Now() + timeout;
  const std::string decode_model =
      spec.decode_model_path.empty() ? spec.model_path : spec.decode_model_path;
  for (size_t i = 0; i < spec.prefill.size(); ++i) {
    std::vector<std::string> args = {"--model=" + spec.model_path, "--listen=127.0.0.1:0",
                                     "--kv_budget_mb=16"};
    args.insert(args.end(), spec.prefill[i].flags.begin(), spec.prefill[i].flags.end());
    absl::StatusOr<std::string> addr =
        c->Spawn(absl::StrCat("prefill", i), TANDEM_PREFILL_BIN, args, deadline);
    if (!addr.ok()) return addr.status();
    c->prefill_.push_back(*addr);
  }
  for (size_t i = 0; i < spec.decode.size(); ++i) {
    std::vector<std::string> args = {"--model=" + decode_model, "--listen=127.0.0.1:0",
                                     "--kv_budget_mb=16"};
    args.insert(args.end(), spec.decode[i].flags.begin(), spec.decode[i].flags.end());
    absl::StatusOr<std::string> addr =
        c->Spawn(absl::StrCat("decode", i), TANDEM_DECODE_BIN, args, deadline);
    if (!addr.ok()) return addr.status();
    c->decode_.push_back(*addr);
  }
  std::vector<std::string> rargs = {"--model=" + spec.model_path, "--listen=127.0.0.1:0",
                                    "--prefill=" + absl::StrJoin(c->prefill_, ","),
                                    "--decode=" + absl::StrJoin(c->decode_, ","),
                                    "--health_interval_ms=100"};
  rargs.insert(rargs.end(), spec.router_flags.begin(), spec.router_flags.end());
  c->credentials_ =
      spec.credentials != nullptr ? spec.credentials : grpc::InsecureChannelCredentials();
  for (int i = 0; i < std::max(spec.routers, 1); ++i) {
    absl::StatusOr<std::string> raddr = c->Spawn(RouterName(i), TANDEM_ROUTER_BIN, rargs, deadline);
    if (!raddr.ok()) return raddr.status();
    c->router_addresses_.push_back(*raddr);
    c->routers_.push_back(
        v1::Router::NewStub(CreateClientChannel(*raddr, c->credentials_, spec.api_key)));
  }
  if (absl::Status s = c->WaitHealthy(deadline); !s.ok()) return s;
  return c;
}

absl::StatusOr<std::string> LocalCluster::Spawn(const std::string& name, const std::string& binary,
                                                std::vector<std::string> args,
                                                absl::Time deadline) {
  const std::string port_file = absl::StrCat(dir_, "/", name, ".port");
  const std::string log = absl::StrCat(dir_, "/", name, ".log");
  args.push_back("--port_file=" + port_file);
  std::vector<char*> argv;
  std::string bin = binary;
  argv.push_back(bin.data());
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // Only async-signal-safe calls between fork and exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  processes_.push_back({name, pid, log});
  while (absl::Now() < deadline) {
    const std::string port = ReadFile(port_file);
    if (!port.empty()) {
      processes_.back().address = absl::StrCat("127.0.0.1:", std::atoi(port.c_str()));
      return processes_.back().address;
    }
    int wstatus = 0;
    if (waitpid(pid, &wstatus, WNOHANG) == pid) {
      processes_.back().pid = -1;
      return absl::InternalError(absl::StrCat(name, " exited during start-up (status ", wstatus,
                                              "):\n", Tail(ReadFile(log), 20)));
    }
    absl::SleepFor(kPoll);
  }
  return absl::DeadlineExceededError(
      absl::StrCat(name, " not ready in time:\n", Tail(ReadFile(log), 20)));
}

absl::Status LocalCluster::WaitHealthy(absl::Time deadline) {
  const size_t want = prefill_.size() + decode_.size();
  std::string last;
  for (size_t r = 0; r < routers_.size(); ++r) {
    bool all = false;
    while (!all && absl::Now() < deadline) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
      v1::ClusterStatusResponse resp;
      const grpc::Status s = routers_[r]->ClusterStatus(&ctx, v1::ClusterStatusRequest(), &resp);
      size_t healthy = 0;
      if (s.ok()) {
        for (const auto& n : resp.nodes()) healthy += n.healthy();
        all = healthy == want;
      }
      last = s.ok() ? absl::StrCat(healthy, " of ", want, " nodes healthy") : s.error_message();
      if (!all) absl::SleepFor(kPoll);
    }
    if (!all) {
      return absl::DeadlineExceededError(absl::StrCat(RouterName(static_cast<int>(r)),
                                                      " never saw every node healthy: ", last, "\n",
                                                      LogTails()));
    }
  }
  return absl::OkStatus();
}

LocalCluster::~LocalCluster() {
  // Every e2e test checks the nodes' block bookkeeping: a failed Free (double free, unknown
  // block) is counted by the node and must never happen.
  if (absl::StatusOr<std::vector<InstanceLoadView>> loads = Loads(); loads.ok()) {
    for (const InstanceLoadView& v : *loads) {
      EXPECT_EQ(v.block_free_errors, 0)
          << v.address << " counted failed BlockManager::Free calls:\n"
          << LogTails(30);
    }
  }
  for (Process& p : processes_) {
    if (p.pid > 0) kill(p.pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (Process& p : processes_) {
    if (p.pid <= 0) continue;
    while (waitpid(p.pid, nullptr, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(p.pid, SIGKILL);
        waitpid(p.pid, nullptr, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    p.pid = -1;
  }
  // Sanitizer builds: a child's report (leak at exit, memory error) must fail the test, not
  // vanish with its log.
  for (const Process& p : processes_) {
    const std::string log = ReadFile(p.log);
    for (const char* marker : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                               "runtime error:", "WARNING: ThreadSanitizer"}) {
      if (log.find(marker) != std::string::npos) {
        ADD_FAILURE() << p.name << " reported a sanitizer error:\n" << Tail(log, 60);
        break;
      }
    }
  }
  if (!dir_.empty() && std::getenv("TANDEM_E2E_KEEP_LOGS") == nullptr) {
    for (const Process& p : processes_) {
      std::remove(p.log.c_str());
      std::remove(absl::StrCat(dir_, "/", p.name, ".port").c_str());
    }
    rmdir(dir_.c_str());
  }
}

void LocalCluster::Kill(const std::string& role, int index) {
  const std::string name = absl::StrCat(role, index);
  for (Process& p : processes_) {
    if (p.name == name && p.pid > 0) {
      kill(p.pid, SIGKILL);
      waitpid(p.pid, nullptr, 0);
      p.pid = -1;
    }
  }
}

LocalCluster::Process* LocalCluster::Find(const std::string& role, int index) {
  const std::string name = ProcessName(role, index);
  for (Process& p : processes_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

void LocalCluster::Terminate(const std::string& role, int index) {
  Process* p = Find(role, index);
  if (p != nullptr && p->pid > 0) kill(p->pid, SIGTERM);
}

absl::StatusOr<int> LocalCluster::WaitExit(const std::string& role, int index,
                                           absl::Duration timeout) {
  Process* p = Find(role, index);
  if (p == nullptr || p->pid <= 0) {
    return absl::NotFoundError(absl::StrCat("no running process ", role, " ", index));
  }
  const absl::Time deadline = absl::Now() + timeout;
  int wstatus = 0;
  while (waitpid(p->pid, &wstatus, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(p->name, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(20));  // poll the exit, bounded by the deadline
  }
  p->pid = -1;
  return wstatus;
}

std::string LocalCluster::Log(const std::string& role, int index) const {
  const std::string name = ProcessName(role, index);
  for (const Process& p : processes_) {
    if (p.name == name) return ReadFile(p.log);
  }
  return "";
}

std::string LocalCluster::LogTails(int lines) const {
  std::string out;
  for (const Process& p : processes_) {
    absl::StrAppend(&out, "---- ", p.name, " (", p.log, ")\n", Tail(ReadFile(p.log), lines), "\n");
  }
  return out;
}

void AddResponse(const v1::GenerateResponse& response, GenerateOutcome* out) {
  if (response.has_token()) {
    out->tokens.push_back(response.token().id());
    out->indices.push_back(response.token().index());
    if (response.token().has_logprobs()) out->logprobs.push_back(response.token().logprobs());
    out->text += response.token().text();
    const int32_t choice = response.token().choice();
    out->choice_tokens[choice].push_back(response.token().id());
    out->choice_text[choice] += response.token().text();
    out->choice_order.push_back(choice);
  } else if (response.has_choice_end()) {
    out->choice_ends[response.choice_end().choice()] = response.choice_end();
    out->choice_text[response.choice_end().choice()] += response.choice_end().text_tail();
  } else if (response.has_final()) {
    out->final = response.final();
    out->text += response.final().text_tail();
  }
}

GenerateOutcome LocalCluster::Generate(
    const v1::GenerateRequest& request, absl::Duration timeout,
    const std::function<void(int32_t, grpc::ClientContext&)>& on_token, int router) {
  GenerateOutcome out;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      routers_[router]->Generate(&ctx, request);
  v1::GenerateResponse resp;
  while (reader->Read(&resp)) {
    AddResponse(resp, &out);
    if (resp.has_token() && on_token) on_token(resp.token().index(), ctx);
  }
  out.status = reader->Finish();
  return out;
}

absl::StatusOr<bool> LocalCluster::HealthServing(const std::string& address,
                                                 absl::Duration timeout) {
  // grpc.health.v1.HealthCheckRequest{service: ""} is the empty message; the response is
  // HealthCheckResponse{status}: 08 01 = SERVING, 08 02 = NOT_SERVING.
  grpc::GenericStub stub(grpc::CreateChannel(address, credentials_));
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Slice empty("");
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::ByteBuffer(&empty, 1), &cq);
  call->StartCall();
  grpc::ByteBuffer reply;
  grpc::Status status;
  call->Finish(&reply, &status, nullptr);
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);  // the call's deadline bounds it
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat(address, " health: ", status.error_message()));
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (reply.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  if (bytes == std::string("\x08\x01", 2)) return true;
  if (bytes == std::string("\x08\x02", 2)) return false;
  return absl::InternalError(
      absl::StrCat(address, " health: unexpected response of ", bytes.size(), " bytes"));
}

absl::StatusOr<int> LocalCluster::KillRunningDecodeNodes() {
  absl::StatusOr<std::vector<InstanceLoadView>> loads = Loads();
  if (!loads.ok()) return loads.status();
  int killed = 0;
  for (const InstanceLoadView& v : *loads) {
    for (size_t d = 0; d < decode_.size(); ++d) {
      if (v.address == decode_[d] && v.load.running() > 0) {
        Kill("decode", static_cast<int>(d));
        ++killed;
      }
    }
  }
  return killed;
}

absl::StatusOr<std::vector<InstanceLoadView>> LocalCluster::Loads() {
  std::vector<InstanceLoadView> out;
  auto ask = [&](const std::string& addr, bool prefill) -> absl::Status {
    auto channel = grpc::CreateChannel(addr, credentials_);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::InstanceStatus st;
    const grpc::Status s =
        prefill ? v1::PrefillService::NewStub(channel)->Status(&ctx, v1::StatusRequest(), &st)
                : v1::DecodeService::NewStub(channel)->Status(&ctx, v1::StatusRequest(), &st);
    if (!s.ok()) return absl::UnavailableError(absl::StrCat(addr, ": ", s.error_message()));
    const v1::ParallelConfig& parallel = st.layout().parallel();
    out.push_back({addr,
                   st.load(),
                   st.block_free_errors(),
                   parallel.tp() * parallel.pcp(),
                   {st.weight_bytes_per_rank().begin(), st.weight_bytes_per_rank().end()}});
    return absl::OkStatus();
  };
  for (const Process& p : processes_) {
    if (p.pid <= 0 || IsRouter(p.name)) continue;
    if (absl::Status s = ask(p.address, p.name.rfind("prefill", 0) == 0); !s.ok()) return s;
  }
  return out;
}

absl::Status LocalCluster::WaitIdle(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last;
  while (absl::Now() < deadline) {
    absl::StatusOr<std::vector<InstanceLoadView>> loads = Loads();
    if (loads.ok()) {
      bool idle = true;
      last.clear();
      for (const InstanceLoadView& v : *loads) {
        const v1::InstanceLoad& l = v.load;
        const bool ok = l.free_blocks() == l.total_blocks() && l.leases() == 0 &&
                        l.running() == 0 && l.queued() == 0;
        idle = idle && ok;
        absl::StrAppend(&last, v.address, ": free ", l.free_blocks(), "/", l.total_blocks(),
                        " leases ", l.leases(), " running ", l.running(), " queued ", l.queued(),
                        "; ");
      }
      if (idle) return absl::OkStatus();
    } else {
      last = std::string(loads.status().message());
    }
    absl::SleepFor(kPoll);
  }
  return absl::DeadlineExceededError(absl::StrCat("cluster not idle: ", last));
}

std::vector<int32_t> RandomPrompt(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = 3 + static_cast<int32_t>(rng() % 250);
  return p;
}

v1::GenerateRequest IdsRequest(const std::vector<int32_t>& prompt, int32_t max_tokens) {
  v1::GenerateRequest req;
  for (int32_t t : prompt) req.mutable_token_ids()->add_ids(t);
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  return req;
}

}  // namespace tandem::testing
