// Stop strings on a stream of generated text (OpenAI's `stop`): finds the first occurrence of
// any stop string, even when it spans several tokens' text, and never lets the matched text or
// text after it out. Text that could be the start of a stop string is held back until the next
// piece decides it. Pure; not thread-safe (one per request).
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
  // call returns "".
  std::string Push(absl::string_view text);
  // The generation ended without a match: the text still held back.
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  size_t longest_ = 0;
  std::string pending_;
  bool include_stop_ = false;
  bool stopped_ = false;
};

}  // namespace tandem
