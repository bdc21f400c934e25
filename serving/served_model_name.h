// The name under which a router and its nodes serve a model (--served_model_name): what
// /v1/models lists, what a request's `model` must say, and what nodes report to the router,
// which refuses a node serving another name. Header-only pure functions (the router and the
// node programs share them without another library).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tandem {

// The name when none is given: the last component of `path` (trailing slashes ignored) without
// a ".gguf" extension (any case) — "models/SmolLM2-135M-Instruct.Q4_1.gguf" serves as
// "SmolLM2-135M-Instruct.Q4_1", a HF checkpoint directory "ckpt/Qwen2.5-0.5B-Instruct/" as
// "Qwen2.5-0.5B-Instruct" — with each whitespace character replaced by '-' (the name travels in
// URLs, metric labels and JSON bodies).
inline std::string DefaultServedModelName(absl::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  const size_t slash = path.rfind('/');
  if (slash != absl::string_view::npos && slash + 1 < path.size()) path.remove_prefix(slash + 1);
  constexpr absl::string_view kGguf = ".gguf";
  if (path.size() > kGguf.size() && absl::EndsWithIgnoreCase(path, kGguf)) {
    path.remove_suffix(kGguf.size());
  }
  std::string name(path);
  for (char& c : name) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c))) c = '-';
  }
  return name;
}

// From the flags --served_model_name and --model_name (its deprecated alias, the flag's name
// before the rename): whichever is set, else DefaultServedModelName(model_path).
// InvalidArgument, naming both flags, when both are set to different names.
[[nodiscard]] inline absl::StatusOr<std::string> ResolveServedModelName(
    absl::string_view served_model_name, absl::string_view model_name_alias,
    absl::string_view model_path) {
  if (!served_model_name.empty() && !model_name_alias.empty() &&
      served_model_name != model_name_alias) {
    return absl::InvalidArgumentError(
        absl::StrCat("--served_model_name '", served_model_name, "' and --model_name '",
                     model_name_alias, "' (its deprecated alias) disagree; give one of them"));
  }
  if (!served_model_name.empty()) return std::string(served_model_name);
  if (!model_name_alias.empty()) return std::string(model_name_alias);
  return DefaultServedModelName(model_path);
}

}  // namespace tandem
