// The CUDA backend's Attention and WriteKv: host metadata in, kernels out.
//
// Host row metadata (AttentionRows) is validated with the CPU kernel's validator
// (attention/cpu/paged_attention.h; padding rows — negative positions — are exempt: they read
// nothing), packed, uploaded through a StagedUpload and re-pointed into the device copy; the
// key split is planned from the rows' longest key range (attention_launch_plan.h) and its
// scratch kept across calls. Unchanged metadata (every layer after the first in a step) is
// neither re-validated nor re-uploaded. An invalid call returns INVALID_ARGUMENT before anything
// is enqueued, so a bad block id can never become an illegal GPU address.
//
// Kernel choice: the per-head kernel (LaunchPagedAttention) unless the environment variable
// TANDEM_CUDA_ATTENTION (read once by Create; an unknown value fails Create) selects another:
// `gqa_split_kv` the GQA split-KV kernel (LaunchDecodeAttention) for every shape it supports
// (decode_attention_plan.h: DecodeKernelSupports); `flashinfer` FlashInfer's decode/prefill
// (attention/cuda/flashinfer/) for every shape flashinfer_plan.h's ChoosePath accepts. Any
// other shape — or every shape when the binary was built without FlashInfer — runs the
// per-head kernel, and the reason is written to stderr once per distinct reason.
//
// Activations: q, k, v and out are f32, or bf16 bits in the same float* buffers (`io` kBF16, the
// backend's TANDEM_CUDA_ACTIVATIONS=bf16); lse is f32 either way. bf16 K/V go straight into the
// KV write, bf16 q/out straight into every kernel: Tandem's read q and write out in bf16
// themselves (PagedAttentionArgs::bf16_io), FlashInfer in place over a bf16 pool
// (flashinfer_plan.h PlanIo; bf16 ↔ f16 once each way through scratch over an f16 pool).
//
// Thread-safety: one owner thread (the backend's); enqueues on the backend's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "attention/attention_args.h"
#include "attention/cuda/decode_attention_plan.h"
#include "attention/cuda/flashinfer/flashinfer_plan.h"
#include "common/cuda/cuda_buffer.h"
#include "common/cuda/staged_upload.h"
#include "model/backend.h"

namespace tandem::gpu {

class AttentionRunner {
 public:
  static absl::StatusOr<std::unique_ptr<AttentionRunner>> Create(int32_t device,
                                                                 cudaStream_t stream,
                                                                 absl::Duration timeout);
  AttentionRunner(const AttentionRunner&) = delete;
  AttentionRunner& operator=(const AttentionRunner&) = delete;

  // ComputeBackend::WriteKv: slots host [m]; k, v device [m][num_kv_heads][head_dim] in `io`.
  absl::Status WriteKv(const KvPoolView& pool, int32_t layer, const int64_t* slots, int64_t m,
                       const float* k, const float* v, ActivationDType io = ActivationDType::kF32);
  // ComputeBackend::Attention: rows host; q, out (in `io`), lse (f32) device.
  absl::Status Attention(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                         const float* q, int32_t num_q_heads, float scale, float* out, float* lse,
                         ActivationDType io = ActivationDType::kF32);

 private:
  AttentionRunner(int32_t device, cudaStream_t stream, absl::Duration timeout,
                  CudaAttentionKernel kernel, std::unique_ptr<StagedUpload> slots,
                  std::unique_ptr<StagedUpload> rows, std::unique_ptr<StagedUpload> fi_plan)
      : device_(device),
        stream_(stream),
        timeout_(timeout),
        kernel_(kernel),
        slots_upload_(std::move(slots)),
        rows_upload_(std::move(rows)),
        fi_plan_upload_(std::move(fi_plan)) {}
  absl::Status ValidateRows(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                            int32_t num_q_heads);
  absl::StatusOr<float*> Scratch(std::unique_ptr<CudaDeviceBuffer>& buf, int64_t floats);
  // The FlashInfer path for validated rows (host arrays); REQUIRES ChoosePath accepted it.
  absl::Status FlashInferAttention(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                                   const float* q, int32_t num_q_heads, float scale, float* out,
                                   float* lse, bool bf16_io);
  void LogOnce(const std::string& line);

  const int32_t device_;
  const cudaStream_t stream_;
  const absl::Duration timeout_;
  const CudaAttentionKernel kernel_;
  std::unique_ptr<StagedUpload> slots_upload_;
  std::unique_ptr<StagedUpload> rows_upload_;
  std::unique_ptr<StagedUpload> fi_plan_upload_;
  std::unique_ptr<CudaDeviceBuffer> scratch_;
  std::set<std::string> logged_;

  // The FlashInfer plan of the last call, reused while the row metadata (blob_) and shapes are
  // unchanged (every layer after the first in a step).
  std::vector<std::byte> fi_rows_blob_;
  AttentionRows fi_rows_;  // its scalars (DCP geometry and rank)
  int32_t fi_heads_ = 0;
  int32_t fi_kv_heads_ = 0;
  int32_t fi_block_size_ = 0;
  std::vector<int32_t> fi_blob_;
  const int32_t* fi_device_plan_ = nullptr;
  flashinfer_plan::PackedPlan fi_layout_;
  flashinfer_plan::FlashInferKernel fi_kernel_ = flashinfer_plan::FlashInferKernel::kDecode;
  flashinfer_plan::DecodeWork fi_decode_;
  int32_t fi_sequences_ = 0;
  int32_t fi_ctas_ = 0;

  // The last metadata that passed validation, and what it was validated against.
  std::vector<std::byte> blob_;
  std::vector<std::byte> validated_blob_;
  KvPoolView validated_pool_;
  int32_t validated_heads_ = 0;
  AttentionRows validated_rows_;
};

}  // namespace tandem::gpu
