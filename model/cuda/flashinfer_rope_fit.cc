#include "model/cuda/flashinfer_rope_fit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace tandem::gpu {
namespace {

constexpr double kTol = kFiRopeFrequencyTolerance;
constexpr double kInf = std::numeric_limits<double>::infinity();

absl::Status Refuse(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("rope_freq_factors", why));
}

// The reason for every array whose shape is not FlashInfer's ramp.
constexpr absl::string_view kNotARamp =
    " are not a ramp FlashInfer's RoPE can apply (Llama 3's or linear scaling): ";

}  // namespace

absl::StatusOr<FiRopeScaling> FitFlashInferRopeScaling(const float* freq_factors, int32_t head_dim,
                                                       float theta) {
  if (freq_factors == nullptr || head_dim <= 0 || head_dim % 2 != 0 || !(theta > 0.f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FitFlashInferRopeScaling: ", freq_factors == nullptr ? "no divisors" : "divisors",
        ", head_dim ", head_dim, ", theta ", theta, " (head_dim even and > 0, theta > 0)"));
  }
  const int32_t n = head_dim / 2;
  float largest = 0.f;
  double r_min = kInf, r_max = 0.0;  // multipliers 1 / divisor
  for (int32_t i = 0; i < n; ++i) {
    const float d = freq_factors[i];
    if (!(d > 0.f) || !std::isfinite(d)) {
      return Refuse(absl::StrCat("[", i, "] = ", d, " is not a positive finite divisor"));
    }
    largest = std::max(largest, d);
    r_min = std::min(r_min, 1.0 / d);
    r_max = std::max(r_max, 1.0 / d);
  }
  if (r_max > 1.0 + kTol) {
    return Refuse(" divide some frequency by less than 1 (FlashInfer only lowers frequencies)");
  }
  // f_i = theta^(−2i/head_dim), highest first.
  const double step = std::pow(static_cast<double>(theta), -2.0 / head_dim);
  auto freq = [&](int32_t i) { return std::pow(step, i); };

  FiRopeScaling out;
  if (r_min < 1.0 - kTol) {
    out.rope_scale = largest;
    // s_i: where pair i sits between the low plateau (0) and the high one (1).
    const double span = 1.0 - r_min, eps = kTol / span;
    auto s_of = [&](int32_t i) { return (1.0 / freq_factors[i] - r_min) / span; };
    int32_t first_mid = -1, last_mid = -1, mids = 0;
    double f_hi_min = kInf, f_lo_max = -kInf;  // the high plateau's lowest f, the low's highest
    for (int32_t i = 0; i < n; ++i) {
      const double s = s_of(i), f = freq(i);
      if (s >= 1.0 - eps) {
        f_hi_min = std::min(f_hi_min, f);
      } else if (s <= eps) {
        f_lo_max = std::max(f_lo_max, f);
      } else {
        if (first_mid < 0) first_mid = i;
        last_mid = i;
        ++mids;
      }
    }
    const bool has_hi = f_hi_min < kInf;
    if (has_hi || mids > 0) {
      double a = 0.0, b = 0.0;
      if (mids >= 2) {
        const double f0 = freq(first_mid), f1 = freq(last_mid);
        a = (s_of(first_mid) - s_of(last_mid)) / (f0 - f1);
        b = s_of(first_mid) - a * f0;
      } else if (mids == 1) {
        const double fm = freq(first_mid), sm = s_of(first_mid);
        if (has_hi) a = std::max(a, (1.0 - sm) / (f_hi_min - fm));
        if (f_lo_max > -kInf) a = std::max(a, sm / (fm - f_lo_max));
        b = sm - a * fm;
      } else {
        a = 1.0 / (f_hi_min - f_lo_max);
        b = -a * f_lo_max;
      }
      if (!(a > 0.0) || !(b < 0.0) || !std::isfinite(a) || !std::isfinite(b)) {
        return Refuse(
            absl::StrCat(kNotARamp, "no line s = a·f + b with a > 0 and b < 0 runs ",
                         "from the low-frequency plateau (s = 0) to the high one (s = 1)"));
      }
      out.llama31 = true;
      out.low_freq_factor = 1.f;
      out.high_freq_factor = static_cast<float>(1.0 - 1.0 / b);
      out.old_context_length = static_cast<float>(-2.0 * std::numbers::pi * a / b);
    }
  }
  // The decision: FlashInfer's own arithmetic on these arguments, pair by pair.
  const FiRopeKernelParams p = FiRopeKernelParamsOf(out);
  double worst = 0.0;
  int32_t worst_pair = 0;
  float worst_got = 0.f;
  for (int32_t i = 0; i < n; ++i) {
    const double want = freq(i) / freq_factors[i];
    const float got = FiRopeScaledFrequency(static_cast<float>(freq(i)), p);
    const double err = std::abs(got - want) / want;
    if (!(err <= worst)) {
      worst = err;
      worst_pair = i;
      worst_got = got;
    }
  }
  if (!(worst <= kTol)) {
    return Refuse(absl::StrCat(kNotARamp, "pair ", worst_pair, " would turn at ", worst_got,
                               " instead of ", freq(worst_pair) / freq_factors[worst_pair],
                               " rad per position (relative error ", worst, " > 2^-19)"));
  }
  return out;
}

}  // namespace tandem::gpu
