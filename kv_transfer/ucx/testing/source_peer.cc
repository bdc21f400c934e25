#include "kv_transfer/ucx/testing/source_peer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kv_transfer/ucx/metadata_proto.h"
#include "kv_transfer/ucx/testing/kv_pattern.h"
#include "kv_transfer/ucx/transfer_source.h"

extern char** environ;

#if defined(__SANITIZE_THREAD__)
// ThreadSanitizer's runtime annotations (libtsan provides them).
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace tandem::testing {
namespace {

// Fills a source pool. Under ThreadSanitizer the fill's writes are not recorded: UCX's progress
// thread later reads the pool inside uninstrumented UCX (its sends), ordered after the fill only
// by UCX's own queues, which TSan cannot see; every 8-byte word read would be a race report that
// deploy/tsan.supp then suppresses, at a cost that grows with the pool (a 75-block pool stalled a
// pull for 20 s in kv_ucx_transfer_test's UcxPullShapeTest under TSan).
void FillPoolUnreported(const KvLayout& layout, int32_t rank, absl::Span<const int32_t> blocks,
                        int64_t num_tokens, absl::Span<std::byte> pool) {
#if defined(__SANITIZE_THREAD__)
  AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
  FillSourcePool(layout, rank, blocks, num_tokens, pool);
#if defined(__SANITIZE_THREAD__)
  AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
#endif
}

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("write to source peer pipe");
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Reads exactly `n` bytes, or fails at EOF or when `deadline` passes.
absl::StatusOr<std::string> ReadExactly(int fd, size_t n, absl::Time deadline) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("source peer sent ", got, " of ", n, " bytes before the deadline"));
    }
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return Errno("poll source peer pipe");
    if (ready == 0) continue;
    const ssize_t r = read(fd, out.data() + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Errno("read source peer pipe");
    if (r == 0) {
      return absl::UnavailableError(
          absl::StrCat("source peer closed its pipe after ", got, " of ", n, " bytes"));
    }
    got += static_cast<size_t>(r);
  }
  return out;
}

// Blocking read of one '\n'-terminated line (the peer waits on its parent; EOF ends it).
std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (true) {
    const ssize_t r = read(fd, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || c == '\n') return line;
    line.push_back(c);
  }
}

// A pipe whose ends are above the descriptors the child uses, close-on-exec.
absl::Status HighPipe(int fds[2]) {
  int raw[2];
  if (pipe2(raw, O_CLOEXEC) != 0) return Errno("pipe2");
  for (int i = 0; i < 2; ++i) {
    fds[i] = fcntl(raw[i], F_DUPFD_CLOEXEC, 10);
    close(raw[i]);
  }
  if (fds[0] < 0 || fds[1] < 0) return Errno("fcntl(F_DUPFD_CLOEXEC)");
  return absl::OkStatus();
}

}  // namespace

std::string EncodeSourcePeerConfig(const SourcePeerConfig& c) {
  const ParallelConfig& p = c.layout.parallel;
  const ModelDims& d = c.layout.dims;
  return absl::StrCat("engine=", c.engine_id, " epoch=", c.epoch, " hash=", c.compat_hash,
                      " tp=", p.tp, " pcp=", p.pcp, " dcp=", p.dcp, " B=", p.block_size,
                      " I=", p.interleave, " layers=", d.num_layers, " qheads=", d.num_q_heads,
                      " kvheads=", d.num_kv_heads, " head_dim=", d.head_dim,
                      " dtype=", static_cast<int>(c.layout.dtype), " tokens=", c.num_tokens,
                      " blocks=", absl::StrJoin(c.blocks, ","));
}

absl::StatusOr<SourcePeerConfig> DecodeSourcePeerConfig(absl::string_view line) {
  std::map<std::string, std::string> kv;
  for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> f = absl::StrSplit(field, absl::MaxSplits('=', 1));
    kv[f.first] = f.second;
  }
  auto get = [&](const char* key) -> absl::StatusOr<std::string> {
    auto it = kv.find(key);
    if (it == kv.end()) return absl::InvalidArgumentError(absl::StrCat("missing ", key));
    return it->second;
  };
  auto get_int = [&](const char* key, auto* out) -> absl::Status {
    absl::StatusOr<std::string> v = get(key);
    if (!v.ok()) return v.status();
    if (!absl::SimpleAtoi(*v, out)) {
      return absl::InvalidArgumentError(absl::StrCat(key, "=", *v, " is not an integer"));
    }
    return absl::OkStatus();
  };
  SourcePeerConfig c;
  absl::StatusOr<std::string> engine = get("engine");
  if (!engine.ok()) return engine.status();
  c.engine_id = *engine;
  int dtype = 0;
  for (absl::Status s :
       {get_int("epoch", &c.epoch), get_int("hash", &c.compat_hash),
        get_int("tp", &c.layout.parallel.tp), get_int("pcp", &c.layout.parallel.pcp),
        get_int("dcp", &c.layout.parallel.dcp), get_int("B", &c.layout.parallel.block_size),
        get_int("I", &c.layout.parallel.interleave), get_int("layers", &c.layout.dims.num_layers),
        get_int("qheads", &c.layout.dims.num_q_heads),
        get_int("kvheads", &c.layout.dims.num_kv_heads),
        get_int("head_dim", &c.layout.dims.head_dim), get_int("dtype", &dtype),
        get_int("tokens", &c.num_tokens)}) {
    if (!s.ok()) return s;
  }
  c.layout.dtype = static_cast<KvDType>(dtype);
  absl::StatusOr<std::string> blocks = get("blocks");
  if (!blocks.ok()) return blocks.status();
  for (absl::string_view b : absl::StrSplit(*blocks, ',', absl::SkipEmpty())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(b, &id)) return absl::InvalidArgumentError("bad block id");
    c.blocks.push_back(id);
  }
  return c;
}

int RunSourcePeer(int in_fd, int out_fd, const SourcePeerDevice* device) {
  absl::StatusOr<SourcePeerConfig> config = DecodeSourcePeerConfig(ReadLine(in_fd));
  if (!config.ok()) {
    std::fprintf(stderr, "source peer: bad config: %s\n", config.status().ToString().c_str());
    return 2;
  }
  UcxTransferSourceOptions options;
  options.engine_id = config->engine_id;
  options.epoch = config->epoch;
  options.compat_hash = config->compat_hash;
  options.layout = config->layout;
  options.pool_bytes_per_rank = PoolBytesForBlocks(config->layout, config->blocks);
  if (device != nullptr) options.device_pools = device->allocate;
  absl::StatusOr<std::unique_ptr<UcxTransferSource>> source = UcxTransferSource::Create(options);
  if (!source.ok()) {
    std::fprintf(stderr, "source peer: %s\n", source.status().ToString().c_str());
    return 3;
  }
  for (int32_t r = 0; r < (*source)->world(); ++r) {
    KvPoolMemory& pool = (*source)->pool(r);
    if (device == nullptr) {
      FillPoolUnreported(config->layout, r, config->blocks, config->num_tokens,
                         absl::Span<std::byte>(static_cast<std::byte*>(pool.base()),
                                               static_cast<size_t>(pool.bytes())));
      continue;
    }
    std::vector<std::byte> host(static_cast<size_t>(pool.bytes()));
    FillSourcePool(config->layout, r, config->blocks, config->num_tokens, absl::MakeSpan(host));
    if (const absl::Status s = device->upload(pool.base(), host.data(), pool.bytes()); !s.ok()) {
      std::fprintf(stderr, "source peer: uploading rank %d's pool: %s\n", r, s.ToString().c_str());
      return 3;
    }
  }
  const std::string metadata = SerializeTransferMetadata((*source)->metadata());
  std::string frame;
  for (int i = 0; i < 8; ++i)
    frame.push_back(static_cast<char>((metadata.size() >> (8 * i)) & 0xff));
  frame += metadata;
  if (!WriteAll(out_fd, frame).ok()) return 4;
  // Serve until told to exit (or the parent is gone); the progress threads do the work.
  while (true) {
    const std::string command = ReadLine(in_fd);
    if (command.empty() || command == "exit") break;
  }
  source->reset();
  return 0;
}

absl::StatusOr<std::unique_ptr<SourcePeerProcess>> SourcePeerProcess::Spawn(
    const Options& options, const SourcePeerConfig& config) {
  int to_peer[2];
  int from_peer[2];
  absl::Status status = HighPipe(to_peer);
  if (!status.ok()) return status;
  status = HighPipe(from_peer);
  if (!status.ok()) {
    close(to_peer[0]);
    close(to_peer[1]);
    return status;
  }

  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::pair<std::string, std::string> kv = absl::StrSplit(*e, absl::MaxSplits('=', 1));
    env[kv.first] = kv.second;
  }
  for (const auto& [k, v] : options.env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = {options.executable};
  argv_strings.insert(argv_strings.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, to_peer[0], kPeerInFd);
  posix_spawn_file_actions_adddup2(&actions, from_peer[1], kPeerOutFd);
  pid_t pid = -1;
  const int rc =
      posix_spawn(&pid, options.executable.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(to_peer[0]);
  close(from_peer[1]);
  if (rc != 0) {
    close(to_peer[1]);
    close(from_peer[0]);
    return absl::InternalError(
        absl::StrCat("posix_spawn ", options.executable, ": ", std::strerror(rc)));
  }
  // From here the destructor kills and reaps the child on every error path.
  std::unique_ptr<SourcePeerProcess> peer(new SourcePeerProcess(pid, to_peer[1], from_peer[0]));
  status = WriteAll(peer->to_peer_, EncodeSourcePeerConfig(config) + "\n");
  if (!status.ok()) return status;
  const absl::Time deadline = absl::Now() + options.startup_timeout;
  absl::StatusOr<std::string> header = ReadExactly(peer->from_peer_, 8, deadline);
  if (!header.ok()) return header.status();
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= static_cast<uint64_t>(static_cast<uint8_t>((*header)[i])) << (8 * i);
  absl::StatusOr<std::string> body = ReadExactly(peer->from_peer_, length, deadline);
  if (!body.ok()) return body.status();
  peer->serialized_metadata_ = *std::move(body);
  absl::StatusOr<TransferMetadata> metadata = ParseTransferMetadata(peer->serialized_metadata_);
  if (!metadata.ok()) return metadata.status();
  peer->metadata_ = *std::move(metadata);
  return peer;
}

SourcePeerProcess::~SourcePeerProcess() {
  if (!reaped_) Kill();
  close(to_peer_);
  close(from_peer_);
}

int SourcePeerProcess::Reap() {
  int wstatus = 0;
  while (waitpid(pid_, &wstatus, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  return wstatus;
}

absl::Status SourcePeerProcess::Signal(int sig) {
  if (reaped_) return absl::FailedPreconditionError("source peer was already reaped");
  if (kill(pid_, sig) != 0) return Errno("kill");
  return absl::OkStatus();
}

void SourcePeerProcess::Kill() {
  if (reaped_) return;
  kill(pid_, SIGKILL);
  Reap();
}

absl::StatusOr<int> SourcePeerProcess::Shutdown(absl::Duration timeout) {
  if (reaped_) return absl::FailedPreconditionError("source peer was already reaped");
  // A stopped peer cannot read its command.
  kill(pid_, SIGCONT);
  WriteAll(to_peer_, "exit\n").IgnoreError();  // a dead peer is handled by the wait below
  // The peer's end of from_peer closes when it exits: wait for EOF, bounded.
  const absl::Status eof = ReadExactly(from_peer_, 1, absl::Now() + timeout).status();
  if (absl::IsDeadlineExceeded(eof)) {
    Kill();
    return absl::DeadlineExceededError(
        absl::StrCat("source peer did not exit within ", absl::FormatDuration(timeout)));
  }
  return Reap();
}

}  // namespace tandem::testing
