// Loads a JSONL prompt dataset: one JSON object per line, either
//   {"prompt": "text", "output_len": 64}
//   {"messages": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}]}
// ("output_len" optional in both; blank lines skipped). Errors name the file and line.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/serve/request_record.h"

namespace tandem::bench {

absl::StatusOr<std::vector<BenchRequest>> ParseDataset(const std::string& jsonl,
                                                       const std::string& name);
absl::StatusOr<std::vector<BenchRequest>> LoadDataset(const std::string& path);

}  // namespace tandem::bench
