#include "router/node_policy.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem {

absl::StatusOr<PolicyKind> ParsePolicyKind(absl::string_view name) {
  if (name == "round_robin") return PolicyKind::kRoundRobin;
  if (name == "least_loaded") return PolicyKind::kLeastLoaded;
  if (name == "kv_aware") return PolicyKind::kKvAware;
  return absl::InvalidArgumentError(absl::StrCat("unknown node selection policy '", name,
                                                 "' (valid: round_robin, least_loaded, kv_aware)"));
}

absl::string_view PolicyKindName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kRoundRobin:
      return "round_robin";
    case PolicyKind::kLeastLoaded:
      return "least_loaded";
    case PolicyKind::kKvAware:
      return "kv_aware";
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

int64_t EstimatedPrefillWork(const NodeCandidate& c, int64_t prompt_tokens) {
  return std::max<int64_t>(prompt_tokens - c.cached_prefix_tokens, 0) +
         std::max<int64_t>(c.pending_prompt_tokens, 0);
}

std::optional<size_t> NodeSelector::Pick(absl::Span<const NodeCandidate> candidates,
                                         const absl::flat_hash_set<std::string>& excluded,
                                         int64_t prompt_tokens) {
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
  const bool by_prefix = kind_ == PolicyKind::kKvAware &&
                         std::any_of(eligible.begin(), eligible.end(),
                                     [&](size_t i) { return candidates[i].has_prefix_digest; });
  const auto key = [&](size_t i) {
    const NodeCandidate& c = candidates[i];
    return std::make_tuple(by_prefix ? EstimatedPrefillWork(c, prompt_tokens) : 0, LoadKey(c));
  };
  size_t best = eligible.front();
  for (const size_t i : eligible) {
    if (key(i) < key(best)) best = i;
  }
  return best;
}

}  // namespace tandem
