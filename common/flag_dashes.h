// Lets every Tandem binary accept --flag-name as well as --flag_name (absl flags need C
// identifiers; users type dashes). Rewrites the names of "--" arguments in place, up to "=" and
// never after a bare "--".
#pragma once

namespace tandem {

void NormalizeFlagDashes(int argc, char** argv);

}  // namespace tandem
