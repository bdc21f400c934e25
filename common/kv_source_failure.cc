#include "common/kv_source_failure.h"

#include <algorithm>

#include "nlohmann/json.hpp"

namespace tandem {

absl::Status BlameKvSource(absl::Status status, const KvSourceFailure& failure) {
  if (status.ok()) return status;
  std::vector<int32_t> ranks = failure.ranks;
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  const nlohmann::json j = {{"prefill_address", failure.prefill_address},
                            {"engine_id", failure.engine_id},
                            {"ranks", ranks}};
  status.SetPayload(kKvSourceFailureUrl,
                    absl::Cord(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  return status;
}

std::optional<KvSourceFailure> KvSourceFailureOf(const absl::Status& status) {
  const auto payload = status.GetPayload(kKvSourceFailureUrl);  // absl::optional here
  if (!payload.has_value()) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(std::string(*payload), nullptr,
                                                 /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  KvSourceFailure out;
  const auto address = j.find("prefill_address");
  const auto engine = j.find("engine_id");
  const auto ranks = j.find("ranks");
  if (address == j.end() || !address->is_string() || engine == j.end() || !engine->is_string() ||
      ranks == j.end() || !ranks->is_array()) {
    return std::nullopt;
  }
  out.prefill_address = address->get<std::string>();
  out.engine_id = engine->get<std::string>();
  for (const nlohmann::json& r : *ranks) {
    if (!r.is_number_integer()) return std::nullopt;
    out.ranks.push_back(r.get<int32_t>());
  }
  return out;
}

absl::Status WithPayloadsOf(absl::Status to, const absl::Status& from) {
  if (to.ok()) return to;
  from.ForEachPayload([&to](absl::string_view url, const absl::Cord& payload) {
    if (!to.GetPayload(url).has_value()) to.SetPayload(url, payload);
  });
  return to;
}

}  // namespace tandem
