#include "model/format/rope_scaling.h"

#include <cmath>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

absl::Status CheckHeadDim(int32_t head_dim) {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope scaling: head_dim ", head_dim, " must be positive and even"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<float>> Llama3RopeFreqFactors(int32_t head_dim, float theta,
                                                         const Llama3RopeScaling& s) {
  if (absl::Status st = CheckHeadDim(head_dim); !st.ok()) return st;
  if (!(s.factor > 0.f) || !std::isfinite(s.factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_scaling: factor is ", s.factor, " (must be finite, > 0)"));
  }
  if (!(s.low_freq_factor > 0.f) || !(s.high_freq_factor > s.low_freq_factor) ||
      !std::isfinite(s.high_freq_factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_scaling: low_freq_factor ", s.low_freq_factor, " and high_freq_factor ",
                     s.high_freq_factor, " must satisfy 0 < low < high"));
  }
  if (s.original_max_position <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_scaling: original_max_position_embeddings is ", s.original_max_position,
                     " (must be positive)"));
  }
  if (!(theta > 0.f)) {
    return absl::InvalidArgumentError(absl::StrCat("rope scaling: theta is ", theta));
  }
  const double original = s.original_max_position;
  const double low_wavelen = original / s.low_freq_factor;
  const double high_wavelen = original / s.high_freq_factor;
  std::vector<float> out(static_cast<size_t>(head_dim / 2));
  for (int32_t i = 0; i < head_dim / 2; ++i) {
    const double inv_freq = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    const double wavelen = 2.0 * std::numbers::pi / inv_freq;
    double divisor;
    if (wavelen < high_wavelen) {
      divisor = 1.0;
    } else if (wavelen > low_wavelen) {
      divisor = s.factor;
    } else {
      const double smooth =
          (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      divisor = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    out[static_cast<size_t>(i)] = static_cast<float>(divisor);
  }
  return out;
}

absl::StatusOr<std::vector<float>> LinearRopeFreqFactors(int32_t head_dim, float factor) {
  if (absl::Status st = CheckHeadDim(head_dim); !st.ok()) return st;
  if (!(factor > 0.f) || !std::isfinite(factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope scaling: linear factor is ", factor, " (must be finite, > 0)"));
  }
  return std::vector<float>(static_cast<size_t>(head_dim / 2), factor);
}

}  // namespace tandem
