// The i-th request of a run, reproducibly: request i depends only on (seed, i), so a run of N
// requests is the same whatever the concurrency and however the requests interleave.
// Prompts are random token ids of a length drawn from a distribution, or entries of a dataset
// (taken in order, wrapping around). Random prompts may all start with the same
// `shared_prefix_len` ids (drawn once from the seed: a long system prompt, for prefix caching and
// KV-aware routing), followed by their own random part of the drawn length. Output lengths come
// from a distribution, or from the dataset entry's own length when `output_from_dataset`. Pure;
// Make is const and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/serve/length_distribution.h"
#include "bench/serve/request_record.h"

namespace tandem::bench {

struct RequestSourceOptions {
  uint64_t seed = 0;
  LengthDistribution prompt_len = LengthDistribution::Fixed(128);
  std::optional<LengthDistribution> output_len =
      LengthDistribution::Fixed(128);  // nullopt: dataset
  int32_t token_id_lo = 0;             // random ids are drawn from [lo, hi)
  int32_t token_id_hi = 1;
  int32_t shared_prefix_len = 0;  // random prompts: ids every prompt starts with (>= 0)
  // Entries with text or chat prompts (and max_tokens when the file gave one, else 0).
  std::vector<BenchRequest> dataset;  // empty: random token ids
};

class RequestSource {
 public:
  // kInvalidArgument: an empty id range, a negative shared prefix or one with a dataset, or
  // output lengths from a dataset that has none (or an entry without one), or no dataset for
  // output lengths "dataset".
  static absl::StatusOr<RequestSource> Create(RequestSourceOptions options);
  BenchRequest Make(int64_t index) const;

 private:
  explicit RequestSource(RequestSourceOptions options);
  RequestSourceOptions options_;
  std::vector<int32_t> shared_prefix_;
};

}  // namespace tandem::bench
