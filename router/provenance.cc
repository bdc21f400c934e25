#include "router/provenance.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace tandem {

std::string LayoutName(int32_t tp, int32_t pcp, int32_t dcp, int32_t interleave,
                       int32_t block_size) {
  if (tp < 1) return "";
  std::string name = absl::StrCat("tp", tp);
  if (pcp > 1) absl::StrAppend(&name, " pcp", pcp);
  if (dcp > 1) {
    absl::StrAppend(&name, " dcp", dcp);
    if (interleave > 1) absl::StrAppend(&name, " interleave", interleave);
  }
  if (block_size > 0) absl::StrAppend(&name, " block", block_size);
  return name;
}

absl::string_view RecoveryName(Recovery recovery) {
  switch (recovery) {
    case Recovery::kPrefillRetry:
      return "prefill_retry";
    case Recovery::kReprefill:
      return "reprefill";
    case Recovery::kResume:
      return "resume";
  }
  return "unknown";
}

bool StrictRefuses(Recovery recovery) { return recovery != Recovery::kPrefillRetry; }

absl::Status StrictRefusal(Recovery recovery, const absl::Status& cause) {
  const char* what = recovery == Recovery::kResume
                         ? "resuming on another decode node"
                         : "prefilling again after the KV transfer failed";
  return absl::AbortedError(absl::StrCat("strict mode: ", what, " (", RecoveryName(recovery),
                                         ") refused after: ", cause.message()));
}

int64_t Provenance::kv_bytes() const {
  int64_t total = 0;
  for (const DecodeHop& hop : decode) total += hop.kv_bytes;
  return total;
}

int Provenance::count(Recovery recovery) const {
  int n = 0;
  for (const NodeFailure& f : failures) n += f.recovery == recovery ? 1 : 0;
  return n;
}

bool Provenance::digests_verified() const {
  bool moved = false;
  for (const DecodeHop& hop : decode) {
    if (hop.colocated) continue;
    if (!hop.digests_verified) return false;
    moved = true;
  }
  return moved;
}

std::string ProvenanceJson(const Provenance& p) {
  using Json = nlohmann::ordered_json;
  Json prefill = Json::array();
  for (const PrefillHop& hop : p.prefill) {
    prefill.push_back(Json{{"node", hop.node}, {"layout", hop.layout}});
  }
  Json decode = Json::array();
  for (const DecodeHop& hop : p.decode) {
    Json j{{"node", hop.node}, {"layout", hop.layout}};
    if (hop.colocated) j["colocated"] = true;
    j["kv_bytes"] = hop.kv_bytes;
    j["digests_verified"] = hop.digests_verified;
    decode.push_back(std::move(j));
  }
  Json failures = Json::array();
  for (const NodeFailure& f : p.failures) {
    failures.push_back(Json{{"role", f.role},
                            {"node", f.node},
                            {"code", f.code},
                            {"recovery", std::string(RecoveryName(f.recovery))}});
  }
  Json j{{"final", p.final},
         {"mode", p.mode},
         {"strict", p.strict},
         {"prefill", std::move(prefill)},
         {"decode", std::move(decode)},
         {"kv_bytes", p.kv_bytes()},
         {"digests_verified", p.digests_verified()},
         {"cached_tokens", p.cached_tokens},
         {"retries", static_cast<int>(p.failures.size())},
         {"reprefills", p.count(Recovery::kReprefill)},
         {"resumes", p.count(Recovery::kResume)},
         {"failures", std::move(failures)}};
  if (!p.refused.empty()) j["refused"] = p.refused;
  // ensure_ascii: header and metadata values must be printable ASCII; a node address from a
  // heartbeat is the node's to choose. Invalid UTF-8 is replaced rather than thrown on.
  return j.dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
}

}  // namespace tandem
