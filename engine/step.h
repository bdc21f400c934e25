// One forward step of an instance, as host-side data (pure). The scheduler builds a StepInput;
// BuildStepPlan flattens it into per-row metadata that every rank thread reads (read-only) to
// derive its own rows, positions and slot mappings.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "attention/dcp_layout.h"
#include "attention/pcp_partition.h"

namespace tandem {

struct StepRequest {
  int64_t start_position = 0;        // position of tokens[0]
  std::vector<int32_t> tokens;       // tokens at positions [start, start + size)
  std::vector<int32_t> block_table;  // virtual block ids; covers positions < start + size
  bool want_logits = false;          // produce logits for the last token
  bool all_logits = false;           // produce logits for every token (scoring, perplexity)
};

struct StepInput {
  std::vector<StepRequest> requests;
};

struct StepPlan {
  // Batch-order rows (request 0's tokens, then request 1's, ...).
  std::vector<int32_t> token;
  std::vector<int64_t> position;
  std::vector<int32_t> request;
  // Block tables in CSR form (see BlockTablesView).
  std::vector<int32_t> block_ids;
  std::vector<int64_t> block_offsets;
  // Batch-order row of each requested logit row, in request order (all rows of a request with
  // all_logits, in position order).
  std::vector<int64_t> logit_rows;
  PcpPartition pcp;

  int64_t num_rows() const { return static_cast<int64_t>(token.size()); }
  int32_t num_requests() const { return static_cast<int32_t>(block_offsets.size()) - 1; }
  BlockTablesView tables() const {
    return BlockTablesView{block_ids.data(), block_offsets.data(), num_requests()};
  }
};

// INVALID_ARGUMENT if a request has no tokens, a negative start, a token outside [0, vocab), or a
// block table too short for its positions under `dcp`.
absl::StatusOr<StepPlan> BuildStepPlan(const StepInput& input, const DcpGeometry& dcp, int32_t pcp,
                                       int32_t vocab_size);

}  // namespace tandem
