#include "bench/serve/request_source.h"

#include "absl/strings/str_cat.h"

namespace tandem::bench {

absl::StatusOr<RequestSource> RequestSource::Create(RequestSourceOptions options) {
  if (options.dataset.empty() && options.token_id_hi <= options.token_id_lo) {
    return absl::InvalidArgumentError(absl::StrCat("random prompt token ids: the range [",
                                                   options.token_id_lo, ", ", options.token_id_hi,
                                                   ") is empty"));
  }
  if (!options.output_len) {
    if (options.dataset.empty()) {
      return absl::InvalidArgumentError("output lengths 'dataset' need a --dataset");
    }
    for (size_t i = 0; i < options.dataset.size(); ++i) {
      if (options.dataset[i].max_tokens < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("output lengths 'dataset': dataset entry ", i, " has no output_len >= 1"));
      }
    }
  }
  return RequestSource(std::move(options));
}

BenchRequest RequestSource::Make(int64_t index) const {
  // One generator per request, seeded from (seed, index) through splitmix64's mixer so that
  // neighbouring indices get unrelated streams.
  uint64_t z = options_.seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  Rng rng(z ^ (z >> 31));
  BenchRequest req;
  if (options_.dataset.empty()) {
    const int32_t n = options_.prompt_len.Sample(rng);
    const uint64_t span = static_cast<uint64_t>(options_.token_id_hi - options_.token_id_lo);
    req.prompt_ids.resize(n);
    for (int32_t& id : req.prompt_ids) {
      id = options_.token_id_lo + static_cast<int32_t>(rng() % span);
    }
  } else {
    req = options_.dataset[static_cast<size_t>(index) % options_.dataset.size()];
  }
  if (options_.output_len) req.max_tokens = options_.output_len->Sample(rng);
  return req;
}

}  // namespace tandem::bench
