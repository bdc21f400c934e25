#include "model/format/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

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

absl::StatusOr<YarnRope> YarnRopeParams(int32_t head_dim, float theta, const YarnRopeScaling& s) {
  if (absl::Status st = CheckHeadDim(head_dim); !st.ok()) return st;
  if (!(s.factor > 0.f) || !std::isfinite(s.factor)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope scaling: yarn factor is ", s.factor, " (must be finite, > 0)"));
  }
  if (s.original_max_position <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("rope scaling: yarn original context length is ",
                                                   s.original_max_position, " (must be positive)"));
  }
  const std::pair<const char*, float> nonnegative[] = {
      {"beta_fast", s.beta_fast}, {"beta_slow", s.beta_slow}, {"ext_factor", s.ext_factor}};
  for (const auto& [name, v] : nonnegative) {
    if (!(v >= 0.f) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope scaling: yarn ", name, " is ", v, " (must be finite, >= 0)"));
    }
  }
  if (!(s.attn_factor > 0.f) || !std::isfinite(s.attn_factor)) {
    return absl::InvalidArgumentError(absl::StrCat("rope scaling: yarn attn_factor is ",
                                                   s.attn_factor, " (must be finite, > 0)"));
  }
  if (!(theta > 0.f) || theta == 1.f) {
    return absl::InvalidArgumentError(absl::StrCat("rope scaling: theta is ", theta));
  }
  // ggml_rope_yarn_corr_dim: the pair index whose wavelength fits `rotations` turns into the
  // original context.
  const auto corr_dim = [&](float rotations) {
    return head_dim * std::log(s.original_max_position / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(static_cast<double>(theta)));
  };
  const double lo = std::max(0.0, std::floor(corr_dim(s.beta_fast)));
  const double hi = std::min(static_cast<double>(head_dim - 1), std::ceil(corr_dim(s.beta_slow)));
  const double scale = 1.0 / s.factor;  // ggml's freq_scale
  YarnRope out;
  out.freq_factors.resize(static_cast<size_t>(head_dim / 2));
  for (int32_t i = 0; i < head_dim / 2; ++i) {
    const double y = (i - lo) / std::max(0.001, hi - lo);
    const double ramp = (1.0 - std::min(1.0, std::max(0.0, y))) * s.ext_factor;
    out.freq_factors[static_cast<size_t>(i)] =
        static_cast<float>(1.0 / (scale * (1.0 - ramp) + ramp));
  }
  // llama.cpp: cparams.yarn_attn_factor = get_mscale(factor) / (1 + 0.1 ln factor) ·
  // rope.scaling.attn_factor, and rope_yarn multiplies it by 1 + 0.1 ln factor again when
  // ext_factor != 0; with ext_factor 0 only attn_factor remains.
  double mscale = s.attn_factor;
  if (s.ext_factor != 0.f && s.factor > 1.f) mscale *= 1.0 + 0.1 * std::log(s.factor);
  out.mscale = static_cast<float>(mscale);
  return out;
}

}  // namespace tandem
