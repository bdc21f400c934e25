#include "serving/proto_convert.h"

#include "absl/strings/str_cat.h"

namespace tandem {

v1::KvLayout ToProto(const KvLayout& layout) {
  v1::KvLayout p;
  v1::ParallelConfig* par = p.mutable_parallel();
  par->set_tp(layout.parallel.tp);
  par->set_pcp(layout.parallel.pcp);
  par->set_dcp(layout.parallel.dcp);
  par->set_block_size(layout.parallel.block_size);
  par->set_interleave(layout.parallel.interleave);
  v1::ModelDims* d = p.mutable_dims();
  d->set_num_layers(layout.dims.num_layers);
  d->set_num_q_heads(layout.dims.num_q_heads);
  d->set_num_kv_heads(layout.dims.num_kv_heads);
  d->set_head_dim(layout.dims.head_dim);
  p.set_dtype(static_cast<v1::KvDType>(layout.dtype));
  return p;
}

absl::StatusOr<KvLayout> FromProto(const v1::KvLayout& p) {
  KvLayout l;
  l.parallel = ParallelConfig{p.parallel().tp(), p.parallel().pcp(), p.parallel().dcp(),
                              p.parallel().block_size(), p.parallel().interleave()};
  l.dims = ModelDims{p.dims().num_layers(), p.dims().num_q_heads(), p.dims().num_kv_heads(),
                     p.dims().head_dim()};
  switch (p.dtype()) {
    case v1::KV_DTYPE_F32:
      l.dtype = KvDType::kF32;
      break;
    case v1::KV_DTYPE_F16:
      l.dtype = KvDType::kF16;
      break;
    case v1::KV_DTYPE_BF16:
      l.dtype = KvDType::kBF16;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown KV dtype ", static_cast<int>(p.dtype())));
  }
  return l;
}

SamplingParams FromProto(const v1::SamplingParams& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p() == 0.f ? 1.f : p.top_p();
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
