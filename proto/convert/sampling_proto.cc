#include "proto/convert/sampling_proto.h"

namespace tandem {

SamplingParams FromProto(const v1::SamplingParams& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.has_top_p() ? p.top_p() : 1.f;
  s.seed = p.seed();
  return s;
}

v1::SamplingParams ToProto(const SamplingParams& s) {
  v1::SamplingParams p;
  p.set_temperature(s.temperature);
  p.set_top_k(s.top_k);
  p.set_top_p(s.top_p);
  p.set_seed(s.seed);
  return p;
}

}  // namespace tandem
