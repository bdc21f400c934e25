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
// TANDEM_CUDA_ATTENTION=gqa_split_kv (read once by Create; another value fails Create) selects
// the GQA split-KV kernel (LaunchDecodeAttention), which is then used for every shape it
// supports (decode_attention_plan.h: DecodeKernelSupports) and the per-head kernel for the rest.
//
// Thread-safety: one owner thread (the backend's); enqueues on the backend's stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "attention/attention_args.h"
#include "attention/cuda/decode_attention_plan.h"
#include "common/cuda/cuda_buffer.h"
#include "common/cuda/staged_upload.h"

namespace tandem::gpu {

class AttentionRunner {
 public:
  static absl::StatusOr<std::unique_ptr<AttentionRunner>> Create(int32_t device,
                                                                 cudaStream_t stream,
                                                                 absl::Duration timeout);
  AttentionRunner(const AttentionRunner&) = delete;
  AttentionRunner& operator=(const AttentionRunner&) = delete;

  // ComputeBackend::WriteKv: slots host [m]; k, v device [m][num_kv_heads][head_dim].
  absl::Status WriteKv(const KvPoolView& pool, int32_t layer, const int64_t* slots, int64_t m,
                       const float* k, const float* v);
  // ComputeBackend::Attention: rows host; q, out, lse device.
  absl::Status Attention(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                         const float* q, int32_t num_q_heads, float scale, float* out, float* lse);

 private:
  AttentionRunner(int32_t device, cudaStream_t stream, absl::Duration timeout,
                  CudaAttentionKernel kernel, std::unique_ptr<StagedUpload> slots,
                  std::unique_ptr<StagedUpload> rows)
      : device_(device),
        stream_(stream),
        timeout_(timeout),
        kernel_(kernel),
        slots_upload_(std::move(slots)),
        rows_upload_(std::move(rows)) {}
  absl::Status ValidateRows(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                            int32_t num_q_heads);
  absl::StatusOr<float*> Scratch(int64_t floats);

  const int32_t device_;
  const cudaStream_t stream_;
  const absl::Duration timeout_;
  const CudaAttentionKernel kernel_;
  std::unique_ptr<StagedUpload> slots_upload_;
  std::unique_ptr<StagedUpload> rows_upload_;
  std::unique_ptr<CudaDeviceBuffer> scratch_;

  // The last metadata that passed validation, and what it was validated against.
  std::vector<std::byte> blob_;
  std::vector<std::byte> validated_blob_;
  KvPoolView validated_pool_;
  int32_t validated_heads_ = 0;
  AttentionRows validated_rows_;
};

}  // namespace tandem::gpu
