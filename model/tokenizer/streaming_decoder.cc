#include "model/tokenizer/streaming_decoder.h"

#include "absl/strings/strip.h"
#include "model/tokenizer/utf8.h"

namespace tandem {

std::string StreamingDecoder::Push(int32_t id) {
  const bool first = first_;
  first_ = false;
  if (id < 0 || id >= tokenizer_.vocab_size()) {
    // Same rendering as Decode: the held bytes are cut off by the bad id.
    std::string out = SanitizeUtf8(pending_);
    pending_.clear();
    out.append(kReplacementUtf8);
    return out;
  }
  if (skip_special_ && tokenizer_.IsSkippable(id)) return {};
  absl::string_view bytes = tokenizer_.TokenBytes(id);
  if (first && tokenizer_.StripsFirstSpace(id, skip_special_)) absl::ConsumePrefix(&bytes, " ");
  pending_.append(bytes.data(), bytes.size());
  std::string out;
  absl::string_view rest(pending_);
  while (!rest.empty()) {
    const Utf8Step step = ScanUtf8(rest);
    if (step.status == Utf8Status::kIncomplete) break;
    if (step.status == Utf8Status::kComplete) {
      out.append(rest.data(), static_cast<size_t>(step.length));
    } else {
      out.append(kReplacementUtf8);
    }
    rest.remove_prefix(static_cast<size_t>(step.length));
  }
  pending_ = std::string(rest);
  return out;
}

std::string StreamingDecoder::Flush() {
  std::string out = SanitizeUtf8(pending_);
  pending_.clear();
  first_ = true;
  return out;
}

}  // namespace tandem
