// Node selection for one fleet (all prefill or all decode instances). Pure logic: the caller
// passes the healthy candidates it knows about; nothing here talks to a node.
//
//   round_robin   cycles through the candidates in the order given (the node pool lists them by
//                 address, so the cycle is stable while the fleet is unchanged).
//   least_loaded  smallest queue depth (running + queued, from the node's last Status), then
//                 most free KV blocks, then fewest calls this router has in flight on the node
//                 (fresher than the polled load, so a burst between two polls still spreads),
//                 then the smallest address. Fully deterministic.
//   kv_aware      (prefill) least estimated prefill work: the prompt tokens the node does not
//                 hold in its prefix cache (prompt_tokens - cached_prefix_tokens) plus the prompt
//                 tokens already waiting or running there (pending_prompt_tokens); ties are broken
//                 as least_loaded. When no eligible candidate publishes a prefix digest it is
//                 exactly least_loaded, so it is safe on fleets without a prefix cache.
//
// Exclusions: a request that failed on some nodes asks for another; excluded nodes are skipped
// unless every candidate is excluded, in which case they are eligible again (one flaky node is
// better than failing the request).
//
// Thread-safety: NodeSelector is safe to call from several threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tandem {

enum class PolicyKind { kRoundRobin, kLeastLoaded, kKvAware };

// "round_robin", "least_loaded" or "kv_aware"; INVALID_ARGUMENT naming the valid values otherwise.
[[nodiscard]] absl::StatusOr<PolicyKind> ParsePolicyKind(absl::string_view name);
absl::string_view PolicyKindName(PolicyKind kind);

struct NodeCandidate {
  std::string address;
  int32_t running = 0;  // from the node's last Status
  int32_t queued = 0;
  int32_t free_blocks = 0;
  int32_t inflight = 0;  // calls this router currently has open on the node
  // kv_aware (prefill nodes):
  bool has_prefix_digest = false;     // the node publishes which prefix blocks it holds
  int64_t cached_prefix_tokens = 0;   // leading prompt tokens the node holds (prefix_match.h)
  int64_t pending_prompt_tokens = 0;  // prompt tokens queued or running on the node
};

// kv_aware's cost of sending a prompt of `prompt_tokens` to `c`: the tokens it would compute
// (never negative) plus the tokens it must compute first.
int64_t EstimatedPrefillWork(const NodeCandidate& c, int64_t prompt_tokens);

class NodeSelector {
 public:
  explicit NodeSelector(PolicyKind kind) : kind_(kind) {}
  NodeSelector(const NodeSelector&) = delete;
  NodeSelector& operator=(const NodeSelector&) = delete;

  PolicyKind kind() const { return kind_; }

  // Index into `candidates` of the chosen node; nullopt when `candidates` is empty.
  // `prompt_tokens` is the request's prompt length (kv_aware only).
  std::optional<size_t> Pick(absl::Span<const NodeCandidate> candidates,
                             const absl::flat_hash_set<std::string>& excluded = {},
                             int64_t prompt_tokens = 0);

 private:
  const PolicyKind kind_;
  std::atomic<uint64_t> next_{0};  // round-robin cursor
};

}  // namespace tandem
