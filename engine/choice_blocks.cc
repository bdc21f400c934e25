#include "engine/choice_blocks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

// Prompt blocks every choice holds as they are (the full ones), at most the whole table.
int64_t SharedBlocks(int64_t per_choice, int64_t prompt_len, int64_t block_tokens) {
  return std::min(per_choice, block_tokens > 0 ? prompt_len / block_tokens : 0);
}

}  // namespace

int64_t ChoiceBlocksNeeded(int64_t per_choice, int64_t prompt_len, int64_t block_tokens,
                           int32_t n) {
  const int64_t own = per_choice - SharedBlocks(per_choice, prompt_len, block_tokens);
  return per_choice + static_cast<int64_t>(std::max(n, 1) - 1) * own;
}

absl::StatusOr<ChoiceTables> ForkChoiceTables(BlockManager& blocks,
                                              absl::Span<const int32_t> allocated,
                                              int64_t per_choice, int64_t prompt_len,
                                              int64_t block_tokens, int32_t n) {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("n must be >= 1 (got ", n, ")"));
  if (block_tokens < 1 || prompt_len < 0 || per_choice < 0) {
    return absl::InvalidArgumentError(absl::StrCat("bad choice table geometry: per_choice ",
                                                   per_choice, ", prompt_len ", prompt_len,
                                                   ", block_tokens ", block_tokens));
  }
  const int64_t expected = ChoiceBlocksNeeded(per_choice, prompt_len, block_tokens, n);
  if (static_cast<int64_t>(allocated.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(n, " choices of ", per_choice,
                                                   " blocks each need ", expected, " blocks, got ",
                                                   allocated.size()));
  }
  const int64_t shared = SharedBlocks(per_choice, prompt_len, block_tokens);
  const int64_t own = per_choice - shared;
  const bool partial = prompt_len % block_tokens != 0 && shared < per_choice;
  ChoiceTables out;
  out.tables.reserve(n);
  out.tables.emplace_back(allocated.begin(), allocated.begin() + per_choice);
  const std::vector<int32_t>& first = out.tables[0];
  std::vector<int32_t> refs;  // one per full prompt block per further choice
  refs.reserve(static_cast<size_t>(shared) * (n - 1));
  for (int32_t i = 1; i < n; ++i) {
    std::vector<int32_t> table(first.begin(), first.begin() + shared);
    const auto mine = allocated.begin() + per_choice + (i - 1) * own;
    table.insert(table.end(), mine, mine + own);
    refs.insert(refs.end(), first.begin(), first.begin() + shared);
    if (partial) out.copies.emplace_back(first[shared], table[shared]);
    out.tables.push_back(std::move(table));
  }
  TANDEM_RETURN_IF_ERROR(blocks.AddRef(refs));
  return out;
}

}  // namespace tandem
