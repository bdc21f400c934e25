#include "client/cli_format.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "proto/convert/role_name.h"

namespace tandem {

absl::StatusOr<std::vector<int32_t>> ParseTokenIds(absl::string_view list) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    part = absl::StripAsciiWhitespace(part);
    int32_t id = 0;
    if (!absl::SimpleAtoi(part, &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt_ids: '", part, "' is not an integer token id"));
    }
    ids.push_back(id);
  }
  return ids;
}

absl::StatusOr<v1::GenerateRequest> BuildGenerateRequest(const GenerateArgs& args) {
  const int forms = (args.prompt.empty() ? 0 : 1) + (args.prompt_ids.empty() ? 0 : 1) +
                    (args.chat.empty() ? 0 : 1);
  if (forms != 1) {
    return absl::InvalidArgumentError("give exactly one of --prompt, --prompt_ids, --chat");
  }
  if (!args.system.empty() && args.chat.empty()) {
    return absl::InvalidArgumentError("--system needs --chat");
  }
  v1::GenerateRequest request;
  request.set_model(args.model);
  if (!args.prompt.empty()) {
    request.set_text(args.prompt);
  } else if (!args.prompt_ids.empty()) {
    absl::StatusOr<std::vector<int32_t>> ids = ParseTokenIds(args.prompt_ids);
    if (!ids.ok()) return ids.status();
    request.mutable_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
  } else {
    v1::ChatConversation* chat = request.mutable_chat();
    if (!args.system.empty()) {
      v1::ChatMessage* system = chat->add_messages();
      system->set_role("system");
      system->set_content(args.system);
    }
    v1::ChatMessage* user = chat->add_messages();
    user->set_role("user");
    user->set_content(args.chat);
  }
  request.set_max_tokens(args.max_tokens);
  v1::SamplingParams* sampling = request.mutable_sampling();
  sampling->set_temperature(args.temperature);
  sampling->set_top_k(args.top_k);
  sampling->set_top_p(args.top_p);
  sampling->set_seed(args.seed);
  request.set_ignore_eos(args.ignore_eos);
  return request;
}

std::string FormatErrorLine(const absl::Status& status) {
  return absl::StrCat("error: ", absl::StatusCodeToString(status.code()), ": ", status.message());
}

std::string FormatStats(const GenerateStats& s) {
  double rate = 0;
  const absl::Duration decode = s.total - s.ttft;
  if (s.tokens >= 2 && decode > absl::ZeroDuration()) {
    rate = (s.tokens - 1) / absl::ToDoubleSeconds(decode);
  }
  return absl::StrFormat("tokens=%d ttft_ms=%.1f tokens_per_s=%.1f finish=%s retries=%d", s.tokens,
                         absl::ToDoubleMilliseconds(s.ttft), rate, s.finish_reason, s.retries);
}

namespace {

// Columns padded to their widest cell, two spaces apart; no trailing spaces.
std::string AlignedTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&line, row[c]);
      if (c + 1 < row.size()) line.append(width[c] - row[c].size() + 2, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

}  // namespace

std::string FormatStatusTable(const v1::ClusterStatusResponse& cluster) {
  std::vector<std::vector<std::string>> rows = {{"ROLE", "ADDRESS", "HEALTHY",
                                                 "LAYOUT(tp/pcp/dcp/B/I)", "RUNNING", "QUEUED",
                                                 "BLOCKS(free/total)", "LEASES", "ERROR"}};
  for (const v1::NodeStatus& node : cluster.nodes()) {
    const v1::ParallelConfig& p = node.status().layout().parallel();
    const v1::InstanceLoad& load = node.status().load();
    const bool polled = node.has_status();
    const bool loaded = polled && node.status().has_load();  // unhealthy nodes report none
    rows.push_back({
        std::string(RoleName(node.role())),
        node.address(),
        node.healthy() ? "yes" : "no",
        polled ? absl::StrCat(p.tp(), "/", p.pcp(), "/", p.dcp(), "/", p.block_size(), "/",
                              p.interleave())
               : "-",
        loaded ? absl::StrCat(load.running()) : "-",
        loaded ? absl::StrCat(load.queued()) : "-",
        loaded ? absl::StrCat(load.free_blocks(), "/", load.total_blocks()) : "-",
        loaded ? absl::StrCat(load.leases()) : "-",
        node.last_error(),
    });
  }
  return absl::StrCat("model: ", cluster.model(), "\n", AlignedTable(rows));
}

}  // namespace tandem
