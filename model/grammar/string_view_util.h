// The public API of model/grammar/ takes std::string_view; Debian's abseil has its own
// absl::string_view. Av converts for absl calls (StrCat, ...).
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace tandem::grammar_internal {

inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace tandem::grammar_internal
