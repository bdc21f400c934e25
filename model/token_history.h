// The token history a request's sampling penalties read (vLLM's semantics, model/sampling.h):
// which ids occur in the prompt, and how often each id occurs in the output (the generated
// tokens). Pure; not thread-safe (one engine thread owns a request's history).
//
// A node sees a request as "context" (the ids whose KV it holds or computes, in order) followed
// by the tokens it samples. Generated token g[i] is sampling draw i, so before draw `step` the
// last `step` ids of the context are generated tokens (g[0..step)) and the rest is the prompt;
// this holds for a first prefill (step 0) and for every resume alike.
#pragma once

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"

namespace tandem {

class TokenHistory {
 public:
  TokenHistory() = default;
  // REQUIRES: num_output <= context.size().
  TokenHistory(absl::Span<const int32_t> context, int64_t num_output);

  // Appends a generated token.
  void AddOutput(int32_t token);

  int64_t num_output() const { return num_output_; }
  const absl::flat_hash_set<int32_t>& prompt_ids() const { return prompt_ids_; }
  // id -> occurrences in the output (ids that occur at least once).
  const absl::flat_hash_map<int32_t, int32_t>& output_counts() const { return output_counts_; }

 private:
  absl::flat_hash_set<int32_t> prompt_ids_;
  absl::flat_hash_map<int32_t, int32_t> output_counts_;
  int64_t num_output_ = 0;
};

}  // namespace tandem
