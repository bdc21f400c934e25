#include "proto/convert/kv_layout_proto.h"

#include "absl/strings/str_cat.h"

namespace tandem {
namespace {

v1::KvDType DTypeToProto(KvDType d) {
  switch (d) {
    case KvDType::kF32:
      return v1::KV_DTYPE_F32;
    case KvDType::kF16:
      return v1::KV_DTYPE_F16;
    case KvDType::kBF16:
      return v1::KV_DTYPE_BF16;
  }
  return v1::KV_DTYPE_F32;
}

absl::StatusOr<KvDType> DTypeFromProto(v1::KvDType d) {
  switch (d) {
    case v1::KV_DTYPE_F32:
      return KvDType::kF32;
    case v1::KV_DTYPE_F16:
      return KvDType::kF16;
    case v1::KV_DTYPE_BF16:
      return KvDType::kBF16;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("layout.dtype has unknown value ", static_cast<int>(d)));
}

}  // namespace

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
  p.set_dtype(DTypeToProto(layout.dtype));
  return p;
}

absl::StatusOr<KvLayout> FromProto(const v1::KvLayout& p, InstanceRole role) {
  if (!p.has_parallel()) return absl::InvalidArgumentError("layout.parallel is missing");
  if (!p.has_dims()) return absl::InvalidArgumentError("layout.dims is missing");
  absl::StatusOr<KvDType> dtype = DTypeFromProto(p.dtype());
  if (!dtype.ok()) return dtype.status();
  KvLayout l;
  const v1::ParallelConfig& par = p.parallel();
  l.parallel = ParallelConfig{par.tp(), par.pcp(), par.dcp(), par.block_size(), par.interleave()};
  const v1::ModelDims& d = p.dims();
  l.dims = ModelDims{d.num_layers(), d.num_q_heads(), d.num_kv_heads(), d.head_dim()};
  l.dtype = *dtype;
  if (absl::Status s = ValidateParallelConfig(l.parallel, l.dims, role); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("layout: ", s.message()));
  }
  return l;
}

}  // namespace tandem
