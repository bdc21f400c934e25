#include "engine/step.h"

#include "absl/strings/str_cat.h"

namespace tandem {

absl::StatusOr<StepPlan> BuildStepPlan(const StepInput& input, const DcpGeometry& dcp, int32_t pcp,
                                       int32_t vocab_size) {
  StepPlan plan;
  plan.block_offsets.push_back(0);
  std::vector<int64_t> lengths;
  for (size_t r = 0; r < input.requests.size(); ++r) {
    const StepRequest& req = input.requests[r];
    if (req.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("step request ", r, " has no tokens"));
    }
    if (req.start_position < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("step request ", r, " starts at negative position"));
    }
    const int64_t end = req.start_position + static_cast<int64_t>(req.tokens.size());
    const int64_t needed = VirtualBlocksFor(dcp, end);
    if (static_cast<int64_t>(req.block_table.size()) < needed) {
      return absl::InvalidArgumentError(absl::StrCat("step request ", r, " needs ", needed,
                                                     " blocks for ", end, " tokens but has ",
                                                     req.block_table.size()));
    }
    for (size_t i = 0; i < req.tokens.size(); ++i) {
      const int32_t tok = req.tokens[i];
      if (tok < 0 || tok >= vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", tok, " outside the vocabulary [0, ", vocab_size, ")"));
      }
      plan.token.push_back(tok);
      plan.position.push_back(req.start_position + static_cast<int64_t>(i));
      plan.request.push_back(static_cast<int32_t>(r));
    }
    plan.block_ids.insert(plan.block_ids.end(), req.block_table.begin(), req.block_table.end());
    plan.block_offsets.push_back(static_cast<int64_t>(plan.block_ids.size()));
    if (req.all_logits) {
      for (int64_t row = plan.num_rows() - static_cast<int64_t>(req.tokens.size());
           row < plan.num_rows(); ++row) {
        plan.logit_rows.push_back(row);
      }
    } else if (req.want_logits) {
      plan.logit_rows.push_back(plan.num_rows() - 1);
    }
    lengths.push_back(static_cast<int64_t>(req.tokens.size()));
  }
  plan.pcp = PartitionForPcp(lengths, pcp);
  return plan;
}

}  // namespace tandem
