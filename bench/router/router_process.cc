#include "bench/router/router_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace tandem::bench {
namespace {

// The integer after `key` on its line of a /proc status file, or -1.
int64_t StatusField(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    int64_t n = 0;
    if (line.rfind(key, 0) == 0 &&
        absl::SimpleAtoi(
            absl::StripAsciiWhitespace(absl::StripSuffix(line.substr(key.size()), "kB")), &n)) {
      return n;
    }
  }
  return -1;
}

// The port written to `path`, or 0 while there is none.
int ReadPort(const std::string& path) {
  std::ifstream in(path);
  int port = 0;
  if (!(in >> port)) return 0;
  return port;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RouterProcess>> RouterProcess::Start(const std::string& binary,
                                                                    std::vector<std::string> args,
                                                                    const std::string& cpus) {
  auto p = std::unique_ptr<RouterProcess>(new RouterProcess());
  char dir[] = "/tmp/tandem-router-capacity-XXXXXX";
  if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
  p->dir_ = dir;
  args.push_back(absl::StrCat("--port_file=", p->dir_, "/grpc_port"));
  args.push_back(absl::StrCat("--http_port_file=", p->dir_, "/http_port"));
  std::vector<std::string> argv;
  if (!cpus.empty()) argv = {"taskset", "-c", cpus};
  argv.push_back(binary);
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string log = p->dir_ + "/router.log";
  p->pid_ = fork();
  if (p->pid_ < 0) return absl::InternalError("fork failed");
  if (p->pid_ == 0) {
    std::freopen(log.c_str(), "w", stderr);
    std::vector<char*> c;
    for (std::string& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    execvp(c[0], c.data());
    _exit(127);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    p->grpc_port_ = ReadPort(p->dir_ + "/grpc_port");
    p->http_port_ = ReadPort(p->dir_ + "/http_port");
    if (p->grpc_port_ != 0 && p->http_port_ != 0) return p;
    int status = 0;
    if (waitpid(p->pid_, &status, WNOHANG) == p->pid_) {
      p->pid_ = -1;
      return absl::InternalError(absl::StrCat("the router exited at start-up; see ", log));
    }
    // Polling an observed condition (the port files), not synchronisation by sleeping.
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat("the router wrote no ports in 60 s; see ", log));
}

RouterProcess::~RouterProcess() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));  // polling the child's exit, bounded above
  }
}

double RouterProcess::CpuSeconds() const {
  std::ifstream in(absl::StrCat("/proc/", pid_, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  double ticks = 0;
  // Fields after the command: state is 3; utime and stime are 14 and 15.
  for (int i = 3; i <= 15 && (fields >> field); ++i) {
    if (i == 14 || i == 15) ticks += std::strtod(field.c_str(), nullptr);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int RouterProcess::Threads() const {
  std::ifstream in(absl::StrCat("/proc/", pid_, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    int n = 0;
    if (line.rfind("Threads:", 0) == 0 && absl::SimpleAtoi(line.substr(8), &n)) return n;
  }
  return -1;
}

std::map<int, int64_t> RouterProcess::ThreadSwitches() const {
  std::map<int, int64_t> switches;
  std::error_code error;
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid_, "/task"), error)) {
    int tid = 0;
    if (!absl::SimpleAtoi(task.path().filename().string(), &tid)) continue;
    // "<run ns> <wait ns> <times run on a CPU>": one small read, where the status file the
    // kernel formats in full cost ~40 µs a thread (a 2,000-thread sample took a core for ~80 ms,
    // long enough to show in the relay's p99).
    const int fd = open((task.path() / "schedstat").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[128];
    const ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(absl::string_view(buf, static_cast<size_t>(n)), ' ', absl::SkipEmpty());
    int64_t runs = 0;
    if (fields.size() >= 3 && absl::SimpleAtoi(absl::StripAsciiWhitespace(fields[2]), &runs)) {
      switches[tid] = runs;
    }
  }
  return switches;
}

int64_t RouterProcess::RssKb() const {
  return StatusField(absl::StrCat("/proc/", pid_, "/status"), "VmRSS:");
}

}  // namespace tandem::bench
