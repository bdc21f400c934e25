// A small scripted run for engine tests: one prefill step holding every request's prompt, then
// decode steps of one token per request. Tokens come from `token` in the order the steps use
// them (prompts request by request, then each decode step's requests in order), so a test that
// seeds its generator gets the same script every time.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/step.h"

namespace tandem::testing {

// `tables[r]` is request r's block table and `len[r]` its prompt length. `skip(s, r)`, when
// given, leaves request r out of decode step s (0-based).
inline std::vector<StepInput> PrefillThenDecodeSteps(
    const std::vector<std::vector<int32_t>>& tables, std::vector<int64_t> len, int decode_steps,
    const std::function<int32_t()>& token, const std::function<bool(int, size_t)>& skip = nullptr) {
  StepInput prefill;
  for (size_t r = 0; r < tables.size(); ++r) {
    std::vector<int32_t> prompt(len[r]);
    for (int32_t& t : prompt) t = token();
    prefill.requests.push_back({0, prompt, tables[r], true});
  }
  std::vector<StepInput> steps = {prefill};
  for (int s = 0; s < decode_steps; ++s) {
    StepInput step;
    for (size_t r = 0; r < tables.size(); ++r) {
      if (skip && skip(s, r)) continue;
      step.requests.push_back({len[r], {token()}, tables[r], true});
      ++len[r];
    }
    steps.push_back(step);
  }
  return steps;
}

}  // namespace tandem::testing
