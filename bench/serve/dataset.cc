#include "bench/serve/dataset.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {

absl::StatusOr<std::vector<BenchRequest>> ParseDataset(const std::string& jsonl,
                                                       const std::string& name) {
  std::vector<BenchRequest> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(jsonl, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(name, ":", line_no, ": ", why));
    };
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    BenchRequest req;
    req.max_tokens = 0;
    if (j.contains("prompt")) {
      if (!j["prompt"].is_string()) return bad("\"prompt\" must be a string");
      req.text = j["prompt"].get<std::string>();
    } else if (j.contains("messages")) {
      const nlohmann::json& m = j["messages"];
      if (!m.is_array() || m.empty()) return bad("\"messages\" must be a non-empty array");
      for (const nlohmann::json& turn : m) {
        if (!turn.is_object() || !turn.contains("role") || !turn["role"].is_string() ||
            !turn.contains("content") || !turn["content"].is_string()) {
          return bad("each message needs string \"role\" and \"content\"");
        }
        req.chat.push_back({turn["role"].get<std::string>(), turn["content"].get<std::string>()});
      }
    } else {
      return bad("needs \"prompt\" or \"messages\"");
    }
    if (j.contains("output_len")) {
      if (!j["output_len"].is_number_integer() || j["output_len"].get<int64_t>() < 1) {
        return bad("\"output_len\" must be an integer >= 1");
      }
      req.max_tokens = j["output_len"].get<int32_t>();
    }
    out.push_back(std::move(req));
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": no entries"));
  return out;
}

absl::StatusOr<std::vector<BenchRequest>> LoadDataset(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("dataset ", path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseDataset(ss.str(), path);
}

}  // namespace tandem::bench
