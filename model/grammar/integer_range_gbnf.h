// GBNF for the decimal integers in an inclusive range, used by the JSON Schema front end
// (json_schema.h) for integer minimum/maximum. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::grammar_internal {

// A GBNF expression (a group of alternatives, no rule names) matching exactly the decimal
// numbers in [lo, hi] without leading zeros. REQUIRES: lo <= hi.
std::string NonNegativeRangeGbnf(uint64_t lo, uint64_t hi);

}  // namespace tandem::grammar_internal
