// Stop strings on a stream of generated text (OpenAI's `stop`): finds the first occurrence of
// any stop string, even when it spans several tokens' text, and never lets the matched text or
// text after it out. Text that could be the start of a stop string is held back until the next
// piece decides it. Pure; not thread-safe (one per request).
//
// min_tokens (vLLM's semantics): a piece pushed with match = false is never searched, so a stop
// string that lies wholly within the text of the first min_tokens tokens does not stop the
// generation; one that ends in a later piece does, even if it began earlier. Held-back text is
// held back either way (it may begin a stop string completed by a later piece).
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tandem {

class StopMatcher {
 public:
  // Empty strings in `stops` are ignored; no stop strings = everything passes through.
  // `include_stop` (vLLM's include_stop_str_in_output): the matched stop string is emitted too.
  explicit StopMatcher(std::vector<std::string> stops, bool include_stop = false);

  // Adds the next piece of generated text; returns the text that is now safe to emit. Once a
  // stop string matched (stopped()), the returned text ends right before it (right after it with
  // include_stop; of two stop strings matching at the same place, the longer) and every later
  // call returns "". `match` false: no stop string may end within `text` (min_tokens not
  // reached yet).
  std::string Push(absl::string_view text, bool match = true);
  // The generation ended without a match: the text still held back.
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::string pending_;
  size_t unmatched_ = 0;  // pending_'s first bytes, pushed with match = false: no match ends there
  bool include_stop_ = false;
  bool stopped_ = false;
};

}  // namespace tandem
