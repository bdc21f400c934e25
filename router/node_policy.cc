#include "router/node_policy.h"

#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem {

absl::StatusOr<PolicyKind> ParsePolicyKind(absl::string_view name) {
  if (name == "round_robin") return PolicyKind::kRoundRobin;
  if (name == "least_loaded") return PolicyKind::kLeastLoaded;
  return absl::InvalidArgumentError(absl::StrCat("unknown node selection policy '", name,
                                                 "' (valid: round_robin, least_loaded)"));
}

absl::string_view PolicyKindName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kRoundRobin:
      return "round_robin";
    case PolicyKind::kLeastLoaded:
      return "least_loaded";
  }
  return "unknown";
}

namespace {

// Sort key of least_loaded: smaller is better.
auto LoadKey(const NodeCandidate& c) {
  const int64_t depth = static_cast<int64_t>(c.running) + c.queued;
  return std::make_tuple(depth, -static_cast<int64_t>(c.free_blocks), c.inflight,
                         absl::string_view(c.address));
}

}  // namespace

std::optional<size_t> NodeSelector::Pick(absl::Span<const NodeCandidate> candidates,
                                         const absl::flat_hash_set<std::string>& excluded) {
  std::vector<size_t> eligible;
  eligible.reserve(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!excluded.contains(candidates[i].address)) eligible.push_back(i);
  }
  if (eligible.empty()) {
    for (size_t i = 0; i < candidates.size(); ++i) eligible.push_back(i);
  }
  if (eligible.empty()) return std::nullopt;

  if (kind_ == PolicyKind::kRoundRobin) {
    const uint64_t turn = next_.fetch_add(1, std::memory_order_relaxed);
    return eligible[turn % eligible.size()];
  }
  size_t best = eligible.front();
  for (const size_t i : eligible) {
    if (LoadKey(candidates[i]) < LoadKey(candidates[best])) best = i;
  }
  return best;
}

}  // namespace tandem
