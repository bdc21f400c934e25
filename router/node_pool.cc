#include "router/node_pool.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include "absl/strings/str_cat.h"

namespace tandem {

absl::string_view RoleName(v1::InstanceRole role) {
  switch (role) {
    case v1::INSTANCE_ROLE_PREFILL:
      return "prefill";
    case v1::INSTANCE_ROLE_DECODE:
      return "decode";
    default:
      return "unspecified";
  }
}

std::shared_ptr<grpc::Channel> DefaultNodeChannel(const std::string& address) {
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
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

NodeLease::NodeLease(std::string address, std::shared_ptr<grpc::Channel> channel,
                     std::shared_ptr<std::atomic<int32_t>> inflight)
    : address_(std::move(address)), channel_(std::move(channel)), inflight_(std::move(inflight)) {
  inflight_->fetch_add(1, std::memory_order_relaxed);
}

NodeLease::~NodeLease() {
  if (inflight_ != nullptr) inflight_->fetch_sub(1, std::memory_order_relaxed);
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
                            const v1::InstanceStatus& status, absl::Time now) {
  absl::MutexLock lock(&mu_);
  const Key key(role, address);
  const auto it = nodes_.find(key);
  if (it == nodes_.end()) return;  // expired while the poll was in flight
  Node& node = it->second;
  node.status = status;
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
}

NodeSelector& NodePool::SelectorFor(v1::InstanceRole role) {
  return role == v1::INSTANCE_ROLE_PREFILL ? prefill_selector_ : decode_selector_;
}

absl::StatusOr<NodeLease> NodePool::Pick(v1::InstanceRole role,
                                         const absl::flat_hash_set<std::string>& excluded) {
  std::vector<NodeCandidate> candidates;
  std::vector<const Node*> healthy;
  int known = 0;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, node] : nodes_) {
    if (key.first != role) continue;
    ++known;
    if (!node.healthy) continue;
    const v1::InstanceLoad& load = node.status.load();
    candidates.push_back({key.second, load.running(), load.queued(), load.free_blocks(),
                          node.inflight->load(std::memory_order_relaxed)});
    healthy.push_back(&node);
  }
  const std::optional<size_t> pick = SelectorFor(role).Pick(candidates, excluded);
  if (!pick.has_value()) {
    return absl::UnavailableError(
        absl::StrCat("no healthy ", RoleName(role), " node (", known, " known, none healthy)"));
  }
  const Node& node = *healthy[*pick];
  return NodeLease(candidates[*pick].address, node.channel, node.inflight);
}

bool NodePool::AwaitHealthy(v1::InstanceRole role, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  const auto some_healthy = [this, role]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [key, node] : nodes_) {
      if (key.first == role && node.healthy) return true;
    }
    return false;
  };
  return mu_.AwaitWithDeadline(absl::Condition(&some_healthy), deadline);
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
