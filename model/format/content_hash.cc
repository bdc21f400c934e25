#include "model/format/content_hash.h"

#include "absl/strings/str_cat.h"

namespace tandem {

void ContentHash::Add(absl::Span<const uint8_t> bytes) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t h = state_;
  for (const uint8_t b : bytes) h = (h ^ b) * kPrime;
  state_ = h;
}

void ContentHash::Add(absl::string_view bytes) {
  Add(absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

void ContentHash::AddU64(uint64_t v) {
  Add(absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(&v), sizeof v));
}

std::string ContentHash::Hex() const { return absl::StrCat(absl::Hex(state_, absl::kZeroPad16)); }

void AddSampled(absl::Span<const uint8_t> data, int samples, size_t window, ContentHash* hash) {
  if (data.size() <= static_cast<size_t>(samples) * window) {
    hash->Add(data);
    return;
  }
  if (samples < 2) {
    hash->Add(data.subspan(0, window));
    return;
  }
  const size_t stride = (data.size() - window) / static_cast<size_t>(samples - 1);
  for (int i = 0; i < samples; ++i)
    hash->Add(data.subspan(static_cast<size_t>(i) * stride, window));
}

}  // namespace tandem
