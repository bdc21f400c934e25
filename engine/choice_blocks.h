// Block tables of n sequences decoding from one prompt's KV (n > 1 from one prefill,
// docs/router.md#n-choices-from-one-prefill). Pure apart from the BlockManager it is given.
//
// The prompt's KV is pulled once, into choice 0's table. Every other choice shares the prompt's
// full virtual blocks — the same ids in its table, one more reference each (BlockManager
// refcounts), never written again since decode writes only positions >= the prompt length — and
// owns the rest of its table. The partial last prompt block (prompt_len not a multiple of the
// virtual block's tokens) is the one a choice's first decode step writes into, so each further
// choice gets its own copy of it (copy-on-write, done eagerly before the choice's first step:
// every choice writes there at once). A choice's table is released like any decode table when it
// ends (DecodeEngine frees it); the shared blocks return to the pool with the last choice.
//
// Thread-safety: as BlockManager's.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/block_manager.h"

namespace tandem {

// Blocks a request of n choices takes: `per_choice` (its prompt + token budget) for choice 0 and,
// for each further choice, those beyond the prompt's full blocks.
int64_t ChoiceBlocksNeeded(int64_t per_choice, int64_t prompt_len, int64_t block_tokens, int32_t n);

struct ChoiceTables {
  std::vector<std::vector<int32_t>> tables;  // [n], each of per_choice blocks; tables[0] first
  // (source, destination) block copies to make before the first step: choice 0's partial last
  // prompt block into each further choice's own (Instance::CopyBlocks). Empty when the prompt
  // ends on a block boundary.
  std::vector<std::pair<int32_t, int32_t>> copies;
};

// Splits `allocated` — ChoiceBlocksNeeded blocks, one reference each: choice 0's table (the first
// per_choice, holding the prompt's KV), then each further choice's own blocks in choice order —
// into n tables, taking one more reference of each full prompt block per further choice.
// INVALID_ARGUMENT (nothing changed) for a count that does not match or n < 1.
absl::StatusOr<ChoiceTables> ForkChoiceTables(BlockManager& blocks,
                                              absl::Span<const int32_t> allocated,
                                              int64_t per_choice, int64_t prompt_len,
                                              int64_t block_tokens, int32_t n);

}  // namespace tandem
