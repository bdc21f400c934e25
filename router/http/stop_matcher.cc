#include "router/http/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace tandem {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : include_stop_(include_stop) {
  for (std::string& s : stops) {
    if (s.empty()) continue;
    longest_ = std::max(longest_, s.size());
    stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::Push(absl::string_view text, bool match_text) {
  if (stopped_) return "";
  pending_.append(text.data(), text.size());
  if (stops_.empty()) return std::exchange(pending_, "");
  if (!match_text) unmatched_ = pending_.size();
  size_t match = std::string::npos;
  size_t match_end = 0;
  for (const std::string& stop : stops_) {
    if (!match_text) break;
    // The first occurrence that ends after the unmatched text.
    const size_t from = unmatched_ >= stop.size() ? unmatched_ - stop.size() + 1 : 0;
    const size_t at = pending_.find(stop, from);
    if (at == std::string::npos || at > match) continue;
    if (at < match) match_end = 0;
    match = at;
    match_end = std::max(match_end, at + stop.size());
  }
  if (match != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, include_stop_ ? match_end : match);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail of the pending text that begins some stop string.
  size_t hold = 0;
  for (size_t k = std::min(pending_.size(), longest_ - 1); k > 0 && hold == 0; --k) {
    const absl::string_view tail = absl::string_view(pending_).substr(pending_.size() - k);
    for (const std::string& stop : stops_) {
      if (absl::string_view(stop).substr(0, k) == tail) {
        hold = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  unmatched_ -= std::min(unmatched_, out.size());
  return out;
}

std::string StopMatcher::Flush() {
  unmatched_ = 0;
  return std::exchange(pending_, "");
}

}  // namespace tandem
