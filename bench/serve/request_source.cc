#include "bench/serve/request_source.h"

#include "absl/strings/str_cat.h"

namespace tandem::bench {

absl::StatusOr<RequestSource> RequestSource::Create(RequestSourceOptions options) {
  if (options.dataset.empty() && options.token_id_hi <= options.token_id_lo) {
    return absl::InvalidArgumentError(absl::StrCat("random prompt token ids: the range [",
                                                   options.token_id_lo, ", ", options.token_id_hi,
                                                   ") is empty"));
  }
  if (options.shared_prefix_len < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the shared prompt prefix length must be >= 0, got ", options.shared_prefix_len));
  }
  if (options.shared_prefix_len > 0 && !options.dataset.empty()) {
    return absl::InvalidArgumentError(
        "a shared prompt prefix applies to random token-id prompts, not to a dataset");
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

namespace {

// One generator per stream, seeded from (seed, stream) through splitmix64's mixer so that
// neighbouring streams are unrelated.
Rng StreamRng(uint64_t seed, int64_t stream) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return Rng(z ^ (z >> 31));
}

void AppendRandomIds(Rng& rng, int32_t lo, int32_t hi, int32_t n, std::vector<int32_t>& ids) {
  const uint64_t span = static_cast<uint64_t>(hi - lo);
  for (int32_t i = 0; i < n; ++i) ids.push_back(lo + static_cast<int32_t>(rng() % span));
}

}  // namespace

RequestSource::RequestSource(RequestSourceOptions options) : options_(std::move(options)) {
  if (options_.shared_prefix_len > 0) {
    Rng rng = StreamRng(options_.seed, -2);  // a stream no request index uses
    AppendRandomIds(rng, options_.token_id_lo, options_.token_id_hi, options_.shared_prefix_len,
                    shared_prefix_);
  }
}

BenchRequest RequestSource::Make(int64_t index) const {
  Rng rng = StreamRng(options_.seed, index);
  BenchRequest req;
  if (options_.dataset.empty()) {
    const int32_t n = options_.prompt_len.Sample(rng);
    req.prompt_ids.reserve(shared_prefix_.size() + static_cast<size_t>(n));
    req.prompt_ids = shared_prefix_;
    AppendRandomIds(rng, options_.token_id_lo, options_.token_id_hi, n, req.prompt_ids);
  } else {
    req = options_.dataset[static_cast<size_t>(index) % options_.dataset.size()];
  }
  if (options_.output_len) req.max_tokens = options_.output_len->Sample(rng);
  return req;
}

}  // namespace tandem::bench
