// The router's view of the fleet: static nodes from flags plus nodes registered through
// Router.Heartbeat (dropped once their ttl passes without a heartbeat), each with a gRPC
// channel, its health and its last InstanceStatus.
//
// A node is keyed by (role, address): one process may serve both roles on one port. A node is
// healthy after a successful Status poll that reports the expected role and the served model
// (an empty model is accepted) and is not draining (SIGTERM: docs/deployment.md), and unhealthy
// from the first failed poll or from a call that found it unreachable, until a later poll succeeds.
// New nodes start unhealthy: the router has no load figures for them yet. Health transitions and
// registrations are logged.
//
// Pick hands out a NodeLease that counts the call as in flight on that node (least_loaded uses
// the count to spread bursts between polls) until the lease is destroyed.
//
// KV-aware routing: a prefill node's Status may carry a prefix-cache digest; each poll replaces
// the node's PrefixDigest (a hash set, built before the lock is taken). A prefill Pick given the
// request's PromptPrefixHashes scores every healthy node with a digest by the prompt prefix it
// holds (counting the blocks of prompts it prefilled since the last poll: NotePrefilled). The
// lease counts the prompt tokens the node is expected to compute as pending there until the call
// ends -- fresher than the polled InstanceLoad.pending_prompt_tokens, which also counts other
// routers' requests; the policy takes the larger of the two.
//
// Thread-safety: all methods are thread-safe. Times are passed in, so tests control the clock.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/cancellation.h"
#include "proto/convert/role_name.h"  // RoleName, used with the pool's roles
#include "router/node_policy.h"
#include "router/prefix_match.h"
#include "router/router_log.h"
#include "tandem/v1/router.pb.h"

namespace tandem {

// gRPC's optimization target for the router's connections, which carry many streams each:
// "throughput" writes what several streams queued at once in one write (router_server.cc).
inline constexpr char kRelayOptimizationTarget[] = "throughput";

// Insecure channel with short reconnect backoff (a restarted node is usable again quickly) and
// HTTP/2 keepalive pings every kKeepaliveTime, so a connection whose peer vanished (a network
// cut: no RST ever arrives) is closed after kKeepaliveTime + kKeepaliveTimeout instead of
// holding calls until TCP gives up, and a fresh connection is dialled once the link is back.
// The nodes' servers accept pings this often (serving/server_runner.cc).
inline constexpr absl::Duration kKeepaliveTime = absl::Seconds(2);
inline constexpr absl::Duration kKeepaliveTimeout = absl::Seconds(2);
std::shared_ptr<grpc::Channel> DefaultNodeChannel(const std::string& address);
// The same channel with `credentials`: TLS (mutual, with the router's certificate) or nullptr for
// insecure.
std::shared_ptr<grpc::Channel> NodeChannel(const std::string& address,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials);

class NodeLease {
 public:
  // `pending_tokens` (may be null) grows by `work_tokens` for the lease's lifetime.
  NodeLease(std::string address, std::shared_ptr<grpc::Channel> channel,
            std::shared_ptr<std::atomic<int32_t>> inflight,
            std::shared_ptr<std::atomic<int64_t>> pending_tokens = nullptr, int64_t work_tokens = 0,
            int64_t cached_prefix_tokens = 0);
  ~NodeLease();
  NodeLease(NodeLease&& other) noexcept = default;
  NodeLease& operator=(NodeLease&& other) noexcept = delete;
  NodeLease(const NodeLease&) = delete;
  NodeLease& operator=(const NodeLease&) = delete;

  const std::string& address() const { return address_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  // Leading prompt tokens the node's digest said it holds when it was picked (0 without one).
  int64_t cached_prefix_tokens() const { return cached_prefix_tokens_; }

 private:
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::shared_ptr<std::atomic<int32_t>> inflight_;        // null once moved from
  std::shared_ptr<std::atomic<int64_t>> pending_tokens_;  // null once moved from, or unused
  int64_t work_tokens_ = 0;
  int64_t cached_prefix_tokens_ = 0;
};

class NodePool {
 public:
  using ChannelFactory = std::function<std::shared_ptr<grpc::Channel>(const std::string&)>;

  NodePool(std::string model_name, PolicyKind prefill_policy, PolicyKind decode_policy, LogFn log,
           ChannelFactory channel_factory = DefaultNodeChannel);
  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;

  // INVALID_ARGUMENT for an empty address or a role other than prefill/decode; ALREADY_EXISTS
  // when the node is listed twice.
  [[nodiscard]] absl::Status AddStatic(const std::string& address, v1::InstanceRole role);

  // Registers or refreshes a node. INVALID_ARGUMENT for an empty address, an unknown role or a
  // ttl <= 0. Returns true when the node is new (the caller may want it polled at once). A
  // heartbeat for a static node is accepted and changes nothing.
  [[nodiscard]] absl::StatusOr<bool> Heartbeat(const std::string& address, v1::InstanceRole role,
                                               absl::Duration ttl, absl::Time now);

  // Drops heartbeat nodes whose last heartbeat is older than their ttl.
  void Expire(absl::Time now);

  struct PollTarget {
    std::string address;
    v1::InstanceRole role;
    std::shared_ptr<grpc::Channel> channel;
  };
  std::vector<PollTarget> PollTargets() const;

  // Result of a Status poll sent at `poll_started` (the blocks NotePrefilled added before then
  // are now covered by the status's digest).
  void ReportStatus(const std::string& address, v1::InstanceRole role,
                    const v1::InstanceStatus& status, absl::Time poll_started, absl::Time now);
  void ReportStatus(const std::string& address, v1::InstanceRole role,
                    const v1::InstanceStatus& status, absl::Time now) {
    ReportStatus(address, role, status, now, now);
  }
  // A prefill of `prompt` succeeded on `address`: if the node publishes a prefix digest, its
  // prompt blocks count as held there until a later poll's digest says otherwise.
  void NotePrefilled(const std::string& address, PromptPrefixHashes& prompt, absl::Time now);
  // A failed poll, or a call that found the node unreachable.
  void ReportFailure(const std::string& address, v1::InstanceRole role, const absl::Status& error);

  // A healthy node of `role` chosen by that fleet's policy, avoiding `excluded` when possible.
  // `prompt` (prefill picks; may be null) lets kv_aware score prefix digests and the lease
  // count the prompt's uncached tokens as pending; it is only used on the calling thread.
  // UNAVAILABLE naming the role when no node of the role is healthy.
  [[nodiscard]] absl::StatusOr<NodeLease> Pick(v1::InstanceRole role,
                                               const absl::flat_hash_set<std::string>& excluded,
                                               PromptPrefixHashes* prompt = nullptr);

  // Blocks until some node of `role` is healthy, `deadline` passes or `cancel` (may be null) is
  // cancelled (woken by every health change, so a request resumes as soon as a poll sees the node
  // back, and by the cancellation at once). True when one is healthy.
  bool AwaitHealthy(v1::InstanceRole role, absl::Time deadline,
                    const CancellationToken* cancel = nullptr) const;
  // False while some node is unhealthy (the health checker then polls faster).
  bool AllHealthy() const;

  // Every node (prefill first, then decode; by address), with health and its last status
  // (absent until a poll succeeded; last_seen_ms_ago is then -1). An unhealthy node's status
  // has no load: the last polled figures are stale.
  v1::ClusterStatusResponse Snapshot(absl::Time now) const;

 private:
  struct Node {
    std::shared_ptr<grpc::Channel> channel;
    bool from_heartbeat = false;
    absl::Duration ttl;
    absl::Time last_heartbeat;
    bool healthy = false;
    bool polled = false;  // a status was received at least once
    v1::InstanceStatus status;
    absl::Time last_seen = absl::InfinitePast();
    std::string last_error;
    std::shared_ptr<std::atomic<int32_t>> inflight = std::make_shared<std::atomic<int32_t>>(0);
    // Prompt tokens of this router's prefill calls in flight on the node (uncached part).
    std::shared_ptr<std::atomic<int64_t>> pending_tokens =
        std::make_shared<std::atomic<int64_t>>(0);
    std::shared_ptr<const PrefixDigest> digest;  // from the last status; null without one
    RecentBlocks recent;                         // NotePrefilled since the last poll started
  };
  using Key = std::pair<int, std::string>;  // (role, address)

  NodeSelector& SelectorFor(v1::InstanceRole role);
  void SetHealth(const Key& key, Node& node, bool healthy, std::string error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string model_name_;
  const LogFn log_;
  const ChannelFactory channel_factory_;
  NodeSelector prefill_selector_;
  NodeSelector decode_selector_;

  mutable absl::Mutex mu_;
  std::map<Key, Node> nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem
