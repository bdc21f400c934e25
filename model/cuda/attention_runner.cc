#include "model/cuda/attention_runner.h"

#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "attention/cpu/paged_attention.h"
#include "attention/cuda/attention_launch_plan.h"
#include "attention/cuda/cuda_attention.h"
#include "attention/cuda/flashinfer/flashinfer_attention.h"
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
  std::unique_ptr<StagedUpload> fi_plan;
  if (kernel == CudaAttentionKernel::kFlashInfer) {
    TANDEM_ASSIGN_OR_RETURN(fi_plan, StagedUpload::Create(device, stream, timeout));
  }
  return std::unique_ptr<AttentionRunner>(new AttentionRunner(
      device, stream, timeout, kernel, std::move(slots), std::move(rows), std::move(fi_plan)));
}

absl::Status AttentionRunner::WriteKv(const KvPoolView& pool, int32_t layer, const int64_t* slots,
                                      int64_t m, const float* k, const float* v,
                                      ActivationDType io) {
  TANDEM_RETURN_IF_ERROR(ValidateKvCacheWrite(pool, layer, slots, m));
  if (m == 0) return absl::OkStatus();
  TANDEM_ASSIGN_OR_RETURN(const void* device_slots,
                          slots_upload_->Upload(slots, m * int64_t{sizeof(int64_t)}));
  const auto* d_slots = static_cast<const int64_t*>(device_slots);
  if (io == ActivationDType::kBF16) {
    return LaunchWriteKvCacheBf16(pool, layer, d_slots, m, reinterpret_cast<const uint16_t*>(k),
                                  reinterpret_cast<const uint16_t*>(v), stream_);
  }
  return LaunchWriteKvCache(pool, layer, d_slots, m, k, v, stream_);
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

absl::StatusOr<float*> AttentionRunner::Scratch(std::unique_ptr<CudaDeviceBuffer>& buf,
                                                int64_t floats) {
  const int64_t bytes = floats * int64_t{sizeof(float)};
  if (buf == nullptr || buf->bytes() < bytes) {
    // Queued kernels may still use the old scratch: drain before it is freed.
    TANDEM_RETURN_IF_ERROR(PollUntilDone([&] { return cudaStreamQuery(stream_); }, timeout_,
                                         "cuda attention: drain before growing scratch"));
    buf.reset();
    TANDEM_ASSIGN_OR_RETURN(buf, CudaDeviceBuffer::Create(device_, bytes + bytes / 2));
  }
  return buf->f32();
}

absl::Status AttentionRunner::Attention(const KvPoolView& pool, int32_t layer,
                                        const AttentionRows& rows, const float* q,
                                        int32_t num_q_heads, float scale, float* out, float* lse,
                                        ActivationDType io) {
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

  if (kernel_ == CudaAttentionKernel::kFlashInfer) {
    const flashinfer_plan::PathChoice choice = flashinfer_plan::ChoosePath(
        true, FlashInferBuilt(), flashinfer_plan::ShapeOf(pool.geometry, num_q_heads));
    if (choice.flashinfer) {
      return FlashInferAttention(pool, layer, rows, q, num_q_heads, scale, out, lse,
                                 io == ActivationDType::kBF16);
    }
    LogOnce(
        absl::StrCat("TANDEM_CUDA_ATTENTION=flashinfer falls back to per_head: ", choice.fallback));
  }

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
    TANDEM_ASSIGN_OR_RETURN(args.scratch, Scratch(scratch_, scratch_floats));
  }
  args.bf16_io = io == ActivationDType::kBF16;  // the kernels read and write bf16 themselves
  return gqa_split_kv ? LaunchDecodeAttention(args, stream_) : LaunchPagedAttention(args, stream_);
}

void AttentionRunner::LogOnce(const std::string& line) {
  if (logged_.insert(line).second) std::cerr << "cuda attention: " << line << std::endl;
}

absl::Status AttentionRunner::FlashInferAttention(const KvPoolView& pool, int32_t layer,
                                                  const AttentionRows& rows, const float* q,
                                                  int32_t num_q_heads, float scale, float* out,
                                                  float* lse, bool bf16_io) {
  namespace fp = flashinfer_plan;
  const PoolGeometry& g = pool.geometry;
  const bool same = fi_device_plan_ != nullptr && fi_rows_blob_ == blob_ &&
                    SameRowScalars(rows, fi_rows_) && fi_heads_ == num_q_heads &&
                    fi_kv_heads_ == g.num_kv_heads && fi_block_size_ == g.block_size;
  if (!same) {
    TANDEM_ASSIGN_OR_RETURN(const fp::PagedKvBatch batch,
                            fp::BuildPagedKvBatch(rows, /*causal_runs=*/true));
    fi_kernel_ = fp::ChooseKernel(batch);
    fi_decode_ = fp::DecodeWork{};
    fp::PrefillWork prefill;
    if (fi_kernel_ == fp::FlashInferKernel::kDecode) {
      fi_decode_ = fp::PlanDecodeWork(batch, g.num_kv_heads, g.block_size);
      fi_ctas_ = fi_decode_.num_ctas();
    } else {
      prefill = fp::PlanPrefillWork(batch, num_q_heads / g.num_kv_heads, fp::kPrefillCtaTileQ);
      fi_ctas_ = prefill.num_ctas();
    }
    fi_sequences_ = batch.num_sequences();
    fi_layout_ = fp::PackPlan(batch, fi_decode_, prefill, fi_blob_);
    fi_device_plan_ = nullptr;
    TANDEM_ASSIGN_OR_RETURN(
        const void* device_plan,
        fi_plan_upload_->Upload(fi_blob_.data(), fi_layout_.ints * int64_t{sizeof(int32_t)}));
    fi_device_plan_ = static_cast<const int32_t*>(device_plan);
    fi_rows_blob_ = blob_;
    fi_rows_ = rows;
    fi_heads_ = num_q_heads;
    fi_kv_heads_ = g.num_kv_heads;
    fi_block_size_ = g.block_size;
  }
  FlashInferAttentionArgs a;
  a.pool = pool;
  a.layer = layer;
  a.num_rows = rows.num_rows;
  a.q = q;
  a.num_q_heads = num_q_heads;
  a.scale = scale;
  a.out = out;
  a.lse = lse;
  a.bf16_io = bf16_io;
  a.kernel = fi_kernel_;
  a.num_sequences = fi_sequences_;
  a.num_ctas = fi_ctas_;
  a.partition_kv = fi_decode_.partition_kv;
  a.plan = fi_device_plan_;
  a.layout = fi_layout_;
  const int64_t bytes = FlashInferScratchBytes(g, num_q_heads, rows.num_rows, fi_decode_);
  TANDEM_ASSIGN_OR_RETURN(float* scratch, Scratch(scratch_, (bytes + 3) / 4));
  a.scratch = scratch;
  return LaunchFlashInferAttention(a, stream_);
}

}  // namespace tandem::gpu
