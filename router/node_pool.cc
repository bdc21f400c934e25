#include "router/node_pool.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tandem {

std::shared_ptr<grpc::Channel> DefaultNodeChannel(const std::string& address) {
  return NodeChannel(address, nullptr);
}

std::shared_ptr<grpc::Channel> NodeChannel(const std::string& address,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  // gRPC's default backoff grows to 120 s; a node that restarts should be reachable again
  // within a health interval or two.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kKeepaliveTime)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(kKeepaliveTimeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // One connection per node carries all of the router's streams to it (router_server.cc).
  args.SetString(GRPC_ARG_OPTIMIZATION_TARGET, std::string(kRelayOptimizationTarget));
  return grpc::CreateCustomChannel(
      address, credentials != nullptr ? credentials : grpc::InsecureChannelCredentials(), args);
}

NodeLease::NodeLease(std::string address, std::shared_ptr<grpc::Channel> channel,
                     std::shared_ptr<std::atomic<int32_t>> inflight,
                     std::shared_ptr<std::atomic<int64_t>> pending_tokens, int64_t work_tokens,
                     int64_t cached_prefix_tokens)
    : address_(std::move(address)),
      channel_(std::move(channel)),
      inflight_(std::move(inflight)),
      pending_tokens_(std::move(pending_tokens)),
      work_tokens_(work_tokens),
      cached_prefix_tokens_(cached_prefix_tokens) {
  inflight_->fetch_add(1, std::memory_order_relaxed);
  if (pending_tokens_ != nullptr) {
    pending_tokens_->fetch_add(work_tokens_, std::memory_order_relaxed);
  }
}

NodeLease::~NodeLease() {
  if (inflight_ != nullptr) inflight_->fetch_sub(1, std::memory_order_relaxed);
  if (pending_tokens_ != nullptr) {
    pending_tokens_->fetch_sub(work_tokens_, std::memory_order_relaxed);
  }
}

NodePool::NodePool(std::string model_name, PolicyKind prefill_policy, PolicyKind decode_policy,
                   LogFn log, ChannelFactory channel_factory)
    : model_name_(std::move(model_name)),
      log_(std::move(log)),
      channel_factory_(std::move(channel_factory)),
      prefill_selector_(prefill_policy),
      decode_selector_(decode_policy) {}

namespace {

bool IsServingRole(v1::InstanceRole role) {
  return role == v1::INSTANCE_ROLE_PREFILL || role == v1::INSTANCE_ROLE_DECODE;
}

absl::Status CheckNodeIdentity(const std::string& address, v1::InstanceRole role) {
  if (address.empty()) return absl::InvalidArgumentError("node address is empty");
  if (!IsServingRole(role)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node ", address, " has role ", RoleName(role), " (want prefill or decode)"));
  }
  return absl::OkStatus();
}

// The digest of a prefill node's status as a lookup set; null when it publishes none.
std::shared_ptr<const PrefixDigest> DigestOf(v1::InstanceRole role,
                                             const v1::InstanceStatus& status) {
  if (role != v1::INSTANCE_ROLE_PREFILL || !status.has_prefix_cache()) return nullptr;
  const v1::PrefixCacheDigest& d = status.prefix_cache();
  if (d.block_tokens() <= 0) return nullptr;
  auto digest = std::make_shared<PrefixDigest>();
  digest->salt = d.salt();
  digest->block_tokens = d.block_tokens();
  digest->truncated = d.truncated();
  digest->blocks.reserve(static_cast<size_t>(d.block_hashes_size()));
  digest->blocks.insert(d.block_hashes().begin(), d.block_hashes().end());
  return digest;
}

}  // namespace

absl::Status NodePool::AddStatic(const std::string& address, v1::InstanceRole role) {
  if (absl::Status s = CheckNodeIdentity(address, role); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  const auto [it, inserted] = nodes_.try_emplace(Key(role, address));
  if (!inserted) {
    return absl::AlreadyExistsError(
        absl::StrCat(RoleName(role), " node ", address, " is listed twice"));
  }
  it->second.channel = channel_factory_(address);
  return absl::OkStatus();
}

absl::StatusOr<bool> NodePool::Heartbeat(const std::string& address, v1::InstanceRole role,
                                         absl::Duration ttl, absl::Time now) {
  if (absl::Status s = CheckNodeIdentity(address, role); !s.ok()) return s;
  if (ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat ttl must be > 0 ms (got ", absl::ToInt64Milliseconds(ttl), ")"));
  }
  bool added = false;
  {
    absl::MutexLock lock(&mu_);
    const auto [it, inserted] = nodes_.try_emplace(Key(role, address));
    Node& node = it->second;
    if (inserted) {
      node.channel = channel_factory_(address);
      node.from_heartbeat = true;
      added = true;
    }
    if (node.from_heartbeat) {
      node.ttl = ttl;
      node.last_heartbeat = now;
    }
  }
  if (added) {
    log_(absl::StrCat(RoleName(role), " node ", address, " registered by heartbeat (ttl ",
                      absl::ToInt64Milliseconds(ttl), " ms)"));
  }
  return added;
}

void NodePool::Expire(absl::Time now) {
  std::vector<std::string> lines;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = nodes_.begin(); it != nodes_.end();) {
      const Node& node = it->second;
      if (node.from_heartbeat && now - node.last_heartbeat > node.ttl) {
        lines.push_back(absl::StrCat(RoleName(static_cast<v1::InstanceRole>(it->first.first)),
                                     " node ", it->first.second, " dropped: no heartbeat for ",
                                     absl::ToInt64Milliseconds(now - node.last_heartbeat),
                                     " ms (ttl ", absl::ToInt64Milliseconds(node.ttl), " ms)"));
        it = nodes_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const std::string& line : lines) log_(line);
}

std::vector<NodePool::PollTarget> NodePool::PollTargets() const {
  absl::MutexLock lock(&mu_);
  std::vector<PollTarget> targets;
  targets.reserve(nodes_.size());
  for (const auto& [key, node] : nodes_) {
    targets.push_back({key.second, static_cast<v1::InstanceRole>(key.first), node.channel});
  }
  return targets;
}

void NodePool::SetHealth(const Key& key, Node& node, bool healthy, std::string error) {
  const bool changed = node.healthy != healthy || (!healthy && !node.polled);
  node.healthy = healthy;
  node.last_error = std::move(error);
  if (!changed) return;
  const std::string what =
      absl::StrCat(RoleName(static_cast<v1::InstanceRole>(key.first)), " node ", key.second);
  // Logged under the lock so transitions of one node are never reordered; the sink is a plain
  // thread-safe write, not a callback into the router.
  log_(healthy ? absl::StrCat(what, " is healthy")
               : absl::StrCat(what, " is unhealthy: ", node.last_error));
}

void NodePool::ReportStatus(const std::string& address, v1::InstanceRole role,
                            const v1::InstanceStatus& status, absl::Time poll_started,
                            absl::Time now) {
  std::shared_ptr<const PrefixDigest> digest = DigestOf(role, status);  // outside the lock
  absl::MutexLock lock(&mu_);
  const Key key(role, address);
  const auto it = nodes_.find(key);
  if (it == nodes_.end()) return;  // expired while the poll was in flight
  Node& node = it->second;
  node.status = status;
  node.digest = std::move(digest);
  node.recent.ForgetBefore(poll_started);
  if (node.digest == nullptr) node.recent.Clear();
  node.last_seen = now;
  std::string error;
  if (status.role() != role) {
    error =
        absl::StrCat("node reports role ", RoleName(status.role()), ", expected ", RoleName(role));
  } else if (!status.model().empty() && status.model() != model_name_) {
    error = absl::StrCat("node serves model '", status.model(), "', the router serves '",
                         model_name_, "'");
  } else if (status.draining()) {
    error = "node is draining (shutting down)";  // nothing new is routed to it
  }
  const bool healthy = error.empty();
  SetHealth(key, node, healthy, std::move(error));
  node.polled = true;
}

void NodePool::ReportFailure(const std::string& address, v1::InstanceRole role,
                             const absl::Status& error) {
  absl::MutexLock lock(&mu_);
  const Key key(role, address);
  const auto it = nodes_.find(key);
  if (it == nodes_.end()) return;
  SetHealth(key, it->second, false, error.ToString());
  it->second.polled = true;
  it->second.recent.Clear();  // it may come back restarted, its cache empty
}

void NodePool::NotePrefilled(const std::string& address, PromptPrefixHashes& prompt,
                             absl::Time now) {
  absl::MutexLock lock(&mu_);
  const auto it = nodes_.find(Key(v1::INSTANCE_ROLE_PREFILL, address));
  if (it == nodes_.end() || it->second.digest == nullptr) return;
  const PrefixDigest& digest = *it->second.digest;
  it->second.recent.Add(prompt.Chain(digest.salt, digest.block_tokens), now);
}

NodeSelector& NodePool::SelectorFor(v1::InstanceRole role) {
  return role == v1::INSTANCE_ROLE_PREFILL ? prefill_selector_ : decode_selector_;
}

absl::StatusOr<NodeLease> NodePool::Pick(v1::InstanceRole role,
                                         const absl::flat_hash_set<std::string>& excluded,
                                         PromptPrefixHashes* prompt) {
  std::vector<NodeCandidate> candidates;
  std::vector<const Node*> healthy;
  int known = 0;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, node] : nodes_) {
    if (key.first != role) continue;
    ++known;
    if (!node.healthy) continue;
    const v1::InstanceLoad& load = node.status.load();
    NodeCandidate c{key.second, load.running(), load.queued(), load.free_blocks(),
                    node.inflight->load(std::memory_order_relaxed)};
    if (prompt != nullptr) {
      // Hashing happens here, under the lock, at most once per distinct (salt, block_tokens)
      // per request: microseconds for a few thousand tokens.
      c.has_prefix_digest = node.digest != nullptr;
      if (c.has_prefix_digest) {
        c.cached_prefix_tokens = CachedPrefixTokens(*node.digest, *prompt, &node.recent);
      }
      c.pending_prompt_tokens = std::max(load.pending_prompt_tokens(),
                                         node.pending_tokens->load(std::memory_order_relaxed));
    }
    candidates.push_back(std::move(c));
    healthy.push_back(&node);
  }
  const int64_t prompt_tokens = prompt != nullptr ? prompt->prompt_tokens() : 0;
  const std::optional<size_t> pick = SelectorFor(role).Pick(candidates, excluded, prompt_tokens);
  if (!pick.has_value()) {
    return absl::UnavailableError(
        absl::StrCat("no healthy ", RoleName(role), " node (", known, " known, none healthy)"));
  }
  const Node& node = *healthy[*pick];
  const NodeCandidate& chosen = candidates[*pick];
  if (prompt == nullptr) return NodeLease(chosen.address, node.channel, node.inflight);
  return NodeLease(chosen.address, node.channel, node.inflight, node.pending_tokens,
                   std::max<int64_t>(prompt_tokens - chosen.cached_prefix_tokens, 0),
                   chosen.cached_prefix_tokens);
}

bool NodePool::AwaitHealthy(v1::InstanceRole role, absl::Time deadline,
                            const CancellationToken* cancel) const {
  // A cancellation only has to release mu_ once: the Await below re-evaluates its condition.
  CancelCallback wake;
  if (cancel != nullptr) wake = cancel->OnCancel([this] { absl::MutexLock lock(&mu_); });
  absl::MutexLock lock(&mu_);
  const auto some_healthy = [this, role]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [key, node] : nodes_) {
      if (key.first == role && node.healthy) return true;
    }
    return false;
  };
  const auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return some_healthy() || (cancel != nullptr && cancel->cancelled());
  };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  return some_healthy();
}

bool NodePool::AllHealthy() const {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, node] : nodes_) {
    if (!node.healthy) return false;
  }
  return true;
}

v1::ClusterStatusResponse NodePool::Snapshot(absl::Time now) const {
  v1::ClusterStatusResponse out;
  out.set_model(model_name_);
  absl::MutexLock lock(&mu_);
  for (const auto& [key, node] : nodes_) {
    v1::NodeStatus* n = out.add_nodes();
    n->set_address(key.second);
    n->set_role(static_cast<v1::InstanceRole>(key.first));
    n->set_healthy(node.healthy);
    n->set_source(node.from_heartbeat ? "heartbeat" : "static");
    if (node.last_seen != absl::InfinitePast()) {
      *n->mutable_status() = node.status;
      // The load of a node that stopped answering is not its load any more: show none rather
      // than figures from before it died (identity and layout stay, they do not go stale).
      if (!node.healthy) n->mutable_status()->clear_load();
    }
    n->set_last_seen_ms_ago(node.last_seen == absl::InfinitePast()
                                ? -1
                                : absl::ToInt64Milliseconds(now - node.last_seen));
    n->set_last_error(node.last_error);
  }
  return out;
}

}  // namespace tandem
