// Lengths (prompt or output tokens) drawn from a distribution, reproducibly from a seed.
//
//   fixed:N              always N
//   uniform:LO:HI        integers in [LO, HI], each equally likely
//   lognormal:MEAN:SD    lognormal whose own mean and standard deviation (in tokens, not logs)
//                        are MEAN and SD, rounded and clamped to [1, 64 * MEAN]
//
// The generator is a std::mt19937_64 and the transforms are written here (not std::*_distribution,
// whose output differs between standard libraries), so a seed gives the same lengths everywhere.
// Pure; a LengthDistribution is immutable and may be shared, the Rng may not.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::bench {

using Rng = std::mt19937_64;

// A double in [0, 1) with 53 random bits.
double UniformUnit(Rng& rng);
// A standard normal draw (Box-Muller, one of the pair).
double StandardNormal(Rng& rng);
// An exponential draw with the given rate (> 0): the gap between Poisson arrivals.
double Exponential(Rng& rng, double rate);

class LengthDistribution {
 public:
  enum class Kind { kFixed, kUniform, kLognormal };

  // Parses the forms above; kInvalidArgument names the rule that failed.
  static absl::StatusOr<LengthDistribution> Parse(absl::string_view spec);
  static LengthDistribution Fixed(int32_t n);

  int32_t Sample(Rng& rng) const;
  Kind kind() const { return kind_; }
  // The spec in canonical form (what Parse accepts), for reports.
  std::string ToString() const;

 private:
  Kind kind_ = Kind::kFixed;
  int32_t a_ = 1;  // fixed: N; uniform: LO
  int32_t b_ = 1;  // uniform: HI
  double mean_ = 1, sd_ = 0;
  double mu_ = 0, sigma_ = 0;  // lognormal parameters of the underlying normal
};

}  // namespace tandem::bench
