#include "model/token_history.h"

namespace tandem {

TokenHistory::TokenHistory(absl::Span<const int32_t> context, int64_t num_output) {
  const size_t prompt_len = context.size() - static_cast<size_t>(num_output);
  prompt_ids_.insert(context.begin(), context.begin() + prompt_len);
  for (size_t i = prompt_len; i < context.size(); ++i) AddOutput(context[i]);
}

void TokenHistory::AddOutput(int32_t token) {
  ++output_counts_[token];
  ++num_output_;
}

}  // namespace tandem
