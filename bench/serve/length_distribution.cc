#include "bench/serve/length_distribution.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace tandem::bench {

double UniformUnit(Rng& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

double StandardNormal(Rng& rng) {
  const double u1 = 1.0 - UniformUnit(rng);  // (0, 1]: log is finite
  const double u2 = UniformUnit(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double Exponential(Rng& rng, double rate) { return -std::log(1.0 - UniformUnit(rng)) / rate; }

LengthDistribution LengthDistribution::Fixed(int32_t n) {
  LengthDistribution d;
  d.kind_ = Kind::kFixed;
  d.a_ = n;
  return d;
}

absl::StatusOr<LengthDistribution> LengthDistribution::Parse(absl::string_view spec) {
  const std::vector<absl::string_view> parts = absl::StrSplit(spec, ':');
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("length distribution '", spec, "': ", why,
                     " (forms: fixed:N, uniform:LO:HI, lognormal:MEAN:SD)"));
  };
  LengthDistribution d;
  if (parts[0] == "fixed") {
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &d.a_)) return bad("fixed needs N");
    if (d.a_ < 1) return bad("N must be >= 1");
    d.kind_ = Kind::kFixed;
    return d;
  }
  if (parts[0] == "uniform") {
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[1], &d.a_) ||
        !absl::SimpleAtoi(parts[2], &d.b_)) {
      return bad("uniform needs LO:HI");
    }
    if (d.a_ < 1 || d.b_ < d.a_) return bad("need 1 <= LO <= HI");
    d.kind_ = Kind::kUniform;
    return d;
  }
  if (parts[0] == "lognormal") {
    if (parts.size() != 3 || !absl::SimpleAtod(parts[1], &d.mean_) ||
        !absl::SimpleAtod(parts[2], &d.sd_)) {
      return bad("lognormal needs MEAN:SD");
    }
    if (!(d.mean_ >= 1) || !(d.sd_ >= 0)) return bad("need MEAN >= 1 and SD >= 0");
    d.kind_ = Kind::kLognormal;
    d.sigma_ = std::sqrt(std::log1p((d.sd_ * d.sd_) / (d.mean_ * d.mean_)));
    d.mu_ = std::log(d.mean_) - 0.5 * d.sigma_ * d.sigma_;
    return d;
  }
  return bad(absl::StrCat("unknown kind '", parts[0], "'"));
}

int32_t LengthDistribution::Sample(Rng& rng) const {
  switch (kind_) {
    case Kind::kFixed:
      return a_;
    case Kind::kUniform:
      return a_ + static_cast<int32_t>(rng() % static_cast<uint64_t>(b_ - a_ + 1));
    case Kind::kLognormal: {
      const double x = std::exp(mu_ + sigma_ * StandardNormal(rng));
      return static_cast<int32_t>(std::clamp(std::round(x), 1.0, 64.0 * mean_));
    }
  }
  return a_;
}

std::string LengthDistribution::ToString() const {
  switch (kind_) {
    case Kind::kFixed:
      return absl::StrCat("fixed:", a_);
    case Kind::kUniform:
      return absl::StrCat("uniform:", a_, ":", b_);
    case Kind::kLognormal:
      return absl::StrFormat("lognormal:%g:%g", mean_, sd_);
  }
  return "";
}

}  // namespace tandem::bench
