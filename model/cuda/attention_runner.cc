#include "model/cuda/attention_runner.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "attention/cpu/paged_attention.h"
#include "attention/cuda/attention_launch_plan.h"
#include "attention/cuda/cuda_attention.h"
#include "common/cuda/cuda_device.h"
#include "common/status_macros.h"

namespace tandem::gpu {
namespace {

bool SamePool(const KvPoolView& a, const KvPoolView& b) {
  const PoolGeometry& x = a.geometry;
  const PoolGeometry& y = b.geometry;
  return a.base == b.base && a.num_blocks == b.num_blocks && x.num_kv_heads == y.num_kv_heads &&
         x.num_layers == y.num_layers && x.block_size == y.block_size && x.head_dim == y.head_dim &&
         x.dtype == y.dtype;
}

bool SameRowScalars(const AttentionRows& a, const AttentionRows& b) {
  return a.num_rows == b.num_rows && a.tables.num_requests == b.tables.num_requests &&
         a.dcp.block_size == b.dcp.block_size && a.dcp.dcp == b.dcp.dcp &&
         a.dcp.interleave == b.dcp.interleave && a.dcp_rank == b.dcp_rank;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AttentionRunner>> AttentionRunner::Create(int32_t device,
                                                                         cudaStream_t stream,
                                                                         absl::Duration timeout) {
  const char* choice = std::getenv(kCudaAttentionEnv);
  TANDEM_ASSIGN_OR_RETURN(const CudaAttentionKernel kernel,
                          ParseCudaAttentionKernel(choice == nullptr ? "" : choice));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<StagedUpload> slots,
                          StagedUpload::Create(device, stream, timeout));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<StagedUpload> rows,
                          StagedUpload::Create(device, stream, timeout));
  return std::unique_ptr<AttentionRunner>(
      new AttentionRunner(device, stream, timeout, kernel, std::move(slots), std::move(rows)));
}

absl::Status AttentionRunner::WriteKv(const KvPoolView& pool, int32_t layer, const int64_t* slots,
                                      int64_t m, const float* k, const float* v) {
  TANDEM_RETURN_IF_ERROR(ValidateKvCacheWrite(pool, layer, slots, m));
  if (m == 0) return absl::OkStatus();
  TANDEM_ASSIGN_OR_RETURN(const void* device_slots,
                          slots_upload_->Upload(slots, m * int64_t{sizeof(int64_t)}));
  return LaunchWriteKvCache(pool, layer, static_cast<const int64_t*>(device_slots), m, k, v,
                            stream_);
}

absl::Status AttentionRunner::ValidateRows(const KvPoolView& pool, int32_t layer,
                                           const AttentionRows& rows, int32_t num_q_heads) {
  // The layer is not part of the key: its range is checked on every call by
  // CheckPagedAttentionArgs, and nothing else in the validation depends on it.
  if (blob_ == validated_blob_ && SamePool(pool, validated_pool_) &&
      num_q_heads == validated_heads_ && SameRowScalars(rows, validated_rows_)) {
    return absl::OkStatus();
  }
  // The validator exempts padding rows (negative positions): they read no request, table or key.
  TANDEM_RETURN_IF_ERROR(ValidateAttentionCall(pool, layer, rows, num_q_heads));
  validated_blob_ = blob_;
  validated_pool_ = pool;
  validated_heads_ = num_q_heads;
  validated_rows_ = rows;
  return absl::OkStatus();
}

absl::StatusOr<float*> AttentionRunner::Scratch(int64_t floats) {
  const int64_t bytes = floats * int64_t{sizeof(float)};
  if (scratch_ == nullptr || scratch_->bytes() < bytes) {
    // Queued kernels may still use the old scratch: drain before it is freed.
    TANDEM_RETURN_IF_ERROR(PollUntilDone([&] { return cudaStreamQuery(stream_); }, timeout_,
                                         "cuda attention: drain before growing scratch"));
    scratch_.reset();
    TANDEM_ASSIGN_OR_RETURN(scratch_, CudaDeviceBuffer::Create(device_, bytes + bytes / 2));
  }
  return scratch_->f32();
}

absl::Status AttentionRunner::Attention(const KvPoolView& pool, int32_t layer,
                                        const AttentionRows& rows, const float* q,
                                        int32_t num_q_heads, float scale, float* out, float* lse) {
  PagedAttentionArgs args;
  args.pool = pool;
  args.layer = layer;
  args.rows = rows;
  args.q = q;
  args.num_q_heads = num_q_heads;
  args.scale = scale;
  args.out = out;
  args.lse = lse;
  // Shapes first (no host array is read before this passes for num_rows > 0).
  TANDEM_RETURN_IF_ERROR(CheckPagedAttentionArgs(args));
  if (rows.num_rows == 0) return absl::OkStatus();
  // Packing copies offsets[0..num_requests] and ids[0..offsets[num_requests]): check just enough
  // to make those reads well defined; ValidateRows checks the rest.
  const int32_t nreq = rows.tables.num_requests;
  if (nreq < 0 || (nreq > 0 && rows.tables.offsets == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block tables: num_requests=", nreq, " with offsets ",
                     rows.tables.offsets == nullptr ? "null" : "set"));
  }
  if (nreq > 0 && (rows.tables.offsets[nreq] < 0 ||
                   (rows.tables.offsets[nreq] > 0 && rows.tables.ids == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat("block tables: offsets[", nreq,
                                                   "]=", rows.tables.offsets[nreq], " with ids ",
                                                   rows.tables.ids == nullptr ? "null" : "set"));
  }
  const PackedRowsLayout layout = PackAttentionRows(rows, blob_);
  TANDEM_RETURN_IF_ERROR(ValidateRows(pool, layer, rows, num_q_heads));

  const int64_t items = rows.num_rows * num_q_heads;
  const bool gqa_split_kv = kernel_ == CudaAttentionKernel::kGqaSplitKv &&
                            DecodeKernelSupports(pool.geometry.head_dim,
                                                 static_cast<int32_t>(pool.geometry.elem_bytes()));
  if (gqa_split_kv) {
    TANDEM_ASSIGN_OR_RETURN(
        const DecodeAttentionPlan plan,
        PlanDecodeAttention(rows.num_rows, num_q_heads, pool.geometry, MaxVisibleTokens(rows)));
    args.split = plan.split;
  } else {
    args.split = PlanAttentionSplit(items, MaxVisibleTokens(rows));
  }
  TANDEM_ASSIGN_OR_RETURN(const void* device_blob,
                          rows_upload_->Upload(blob_.data(), layout.bytes));
  args.rows = RowsInBlob(rows, layout, device_blob);
  const int64_t scratch_floats = AttentionScratchFloats(args.split, items, pool.geometry.head_dim);
  if (scratch_floats > 0) {
    TANDEM_ASSIGN_OR_RETURN(args.scratch, Scratch(scratch_floats));
  }
  return gqa_split_kv ? LaunchDecodeAttention(args, stream_) : LaunchPagedAttention(args, stream_);
}

}  // namespace tandem::gpu
