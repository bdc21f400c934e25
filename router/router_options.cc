#include "router/router_options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tandem {
namespace {

absl::Status Positive(absl::string_view name, absl::Duration d) {
  if (d > absl::ZeroDuration()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, " must be > 0 (got ", absl::FormatDuration(d), ")"));
}

}  // namespace

absl::Status ValidateRouterOptions(const RouterOptions& o) {
  if (o.listen.empty()) return absl::InvalidArgumentError("listen address is empty");
  for (const auto* list : {&o.prefill_nodes, &o.decode_nodes}) {
    for (const std::string& address : *list) {
      if (address.empty()) return absl::InvalidArgumentError("empty node address");
    }
  }
  if (absl::Status s = Positive("health_interval", o.health_interval); !s.ok()) return s;
  if (absl::Status s = Positive("rpc_timeout", o.rpc_timeout); !s.ok()) return s;
  if (absl::Status s = Positive("decode_idle_timeout", o.decode_idle_timeout); !s.ok()) return s;
  if (o.decode_policy == PolicyKind::kKvAware) {
    return absl::InvalidArgumentError(
        "decode_policy kv_aware: decode nodes keep no prefix cache (use round_robin or "
        "least_loaded)");
  }
  if (o.colocated && !o.prefill_nodes.empty()) {
    return absl::InvalidArgumentError(
        "colocated: decode nodes prefill prompts themselves, so no prefill nodes may be listed "
        "(drop --prefill)");
  }
  if (o.colocated && o.pipelined_transfer) {
    return absl::InvalidArgumentError(
        "pipelined_transfer: colocated serving moves no KV between nodes (drop one of "
        "--colocated, --pipelined_transfer)");
  }
  if (o.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_attempts must be >= 1 (got ", o.max_attempts, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ParseAddressList(absl::string_view list) {
  std::vector<std::string> out;
  if (absl::StripAsciiWhitespace(list).empty()) return out;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("empty address in list '", list, "' (expected host:port,host:port)"));
    }
    out.emplace_back(part);
  }
  return out;
}

}  // namespace tandem
