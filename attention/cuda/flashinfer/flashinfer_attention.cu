// LaunchFlashInferAttention (flashinfer_attention.h): Tandem's q/out (f32, or bf16 with the
// backend's bf16 activations) and natural-log LSE around FlashInfer's 16-bit decode and prefill
// kernels.
//
// The kernels take one dtype for q, KV and out. With bf16 q/out over a bf16 pool FlashInfer
// reads and writes the caller's buffers (flashinfer_plan.h PlanIo); otherwise q is converted to
// the KV dtype into scratch with the round-to-nearest-even of attention/kv_dtype.h and out comes
// back from scratch. FinishRows converts out where it came through scratch, multiplies the
// base-2 LSE by ln 2 and writes out 0 / lse −inf for rows whose row_keys is 0 (padding rows and
// rows that own no key), whatever FlashInfer left there.
#include <cuda_runtime.h>
#include <math.h>

#include "absl/strings/str_cat.h"
#include "attention/cuda/flashinfer/flashinfer_attention.h"
#include "attention/cuda/flashinfer/flashinfer_kernels.h"
#include "attention/kv_dtype.h"
#include "common/cuda/cuda_status.h"

namespace tandem::gpu {
namespace {

namespace fp = flashinfer_plan;

constexpr int kThreads = 256;
constexpr int64_t kAlign = 256;

int64_t AlignUp(int64_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

struct ScratchLayout {
  int64_t q16 = 0, o16 = 0, lse2 = 0, tmp_v = 0, tmp_s = 0, bytes = 0;
};

ScratchLayout LayoutOf(int32_t head_dim, int32_t num_q_heads, int64_t num_rows, int64_t ctas,
                       bool partition) {
  ScratchLayout l;
  const int64_t items = num_rows * num_q_heads;
  l.q16 = 0;
  l.o16 = l.q16 + AlignUp(items * head_dim * 2);
  l.lse2 = l.o16 + AlignUp(items * head_dim * 2);
  l.tmp_v = l.lse2 + AlignUp(items * 4);
  const int64_t parts = partition ? ctas * num_q_heads : 0;
  l.tmp_s = l.tmp_v + AlignUp(parts * head_dim * 2);
  l.bytes = l.tmp_s + AlignUp(parts * 4);
  return l;
}

int64_t Blocks(int64_t n) { return (n + kThreads - 1) / kThreads; }

// q (f32, or bf16 bits when q_bf16) to the KV dtype (bf16 when kv_bf16, else f16).
__global__ void NarrowKernel(const void* x, bool q_bf16, int64_t n, bool kv_bf16, uint16_t* y) {
  const int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  if (i >= n) return;
  const float v =
      q_bf16 ? Bf16ToFloat(static_cast<const uint16_t*>(x)[i]) : static_cast<const float*>(x)[i];
  y[i] = kv_bf16 ? FloatToBf16(v) : FloatToHalf(v);
}

// o16: FlashInfer's output in the KV dtype (kv_bf16), possibly the caller's out itself (then
// out_bf16, and each element is rewritten with its own value or 0). out: f32, or bf16 bits.
__global__ void FinishRowsKernel(const uint16_t* o16, const float* lse2, const int32_t* row_keys,
                                 int64_t num_rows, int32_t heads, int32_t head_dim, bool kv_bf16,
                                 bool out_bf16, void* out, float* lse) {
  const int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x;
  const int64_t per_row = int64_t{heads} * head_dim;
  if (i >= num_rows * per_row) return;
  const int64_t row = i / per_row;
  const bool empty = row_keys[row] == 0;
  const float v = empty ? 0.f : (kv_bf16 ? Bf16ToFloat(o16[i]) : HalfToFloat(o16[i]));
  if (out_bf16) {
    static_cast<uint16_t*>(out)[i] = FloatToBf16(v);  // exact when o16 is bf16
  } else {
    static_cast<float*>(out)[i] = v;
  }
  if (i % head_dim == 0) {
    const int64_t item = i / head_dim;
    lse[item] = empty ? -INFINITY : fp::Log2LseToNatural(lse2[item]);
  }
}

int32_t Alignment(const void* p) {
  int32_t a = 256;
  const auto v = reinterpret_cast<uintptr_t>(p);
  while (a > 1 && v % static_cast<uintptr_t>(a) != 0) a /= 2;
  return a;
}

using Entry = absl::Status (*)(const fi_internal::FiCall&, cudaStream_t);

Entry EntryFor(fp::FlashInferKernel kernel, KvDType dtype, int32_t head_dim) {
  const bool bf16 = dtype == KvDType::kBF16;
  if (kernel == fp::FlashInferKernel::kDecode) {
    if (head_dim == 64) return bf16 ? fi_internal::DecodeBf16Hd64 : fi_internal::DecodeF16Hd64;
    return bf16 ? fi_internal::DecodeBf16Hd128 : fi_internal::DecodeF16Hd128;
  }
  if (head_dim == 64) return bf16 ? fi_internal::PrefillBf16Hd64 : fi_internal::PrefillF16Hd64;
  return bf16 ? fi_internal::PrefillBf16Hd128 : fi_internal::PrefillF16Hd128;
}

}  // namespace

bool FlashInferBuilt() { return true; }

int64_t FlashInferScratchBytes(const PoolGeometry& g, int32_t num_q_heads, int64_t num_rows,
                               const fp::DecodeWork& decode) {
  return LayoutOf(g.head_dim, num_q_heads, num_rows, decode.num_ctas(), decode.partition_kv).bytes;
}

absl::Status LaunchFlashInferAttention(const FlashInferAttentionArgs& a, void* stream) {
  const PoolGeometry& g = a.pool.geometry;
  if (absl::Status s = fp::CheckFlashInferShape(fp::ShapeOf(g, a.num_q_heads)); !s.ok()) return s;
  if (a.layer < 0 || a.layer >= g.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("flashinfer: layer ", a.layer, " outside [0, ", g.num_layers, ")"));
  }
  if (a.num_rows < 0 || a.num_sequences < 0 || a.num_ctas < 0) {
    return absl::InvalidArgumentError(absl::StrCat("flashinfer: negative count (rows ", a.num_rows,
                                                   ", sequences ", a.num_sequences, ", ctas ",
                                                   a.num_ctas, ")"));
  }
  if (a.num_rows == 0) return absl::OkStatus();
  if (a.q == nullptr || a.out == nullptr || a.lse == nullptr || a.plan == nullptr ||
      a.scratch == nullptr || a.pool.base == nullptr) {
    return absl::InvalidArgumentError("flashinfer: null q, out, lse, plan, scratch or pool base");
  }
  const bool partition = a.kernel == fp::FlashInferKernel::kDecode && a.partition_kv;
  const ScratchLayout l = LayoutOf(g.head_dim, a.num_q_heads, a.num_rows, a.num_ctas, partition);
  auto* base = static_cast<char*>(a.scratch);
  const bool bf16 = g.dtype == KvDType::kBF16;
  const auto s = static_cast<cudaStream_t>(stream);
  const int64_t n = a.num_rows * a.num_q_heads * g.head_dim;

  const fp::IoPlan io = fp::PlanIo(g.dtype, a.bf16_io, Alignment(a.q), Alignment(a.out));
  void* q16 = io.q_direct ? const_cast<float*>(a.q) : static_cast<void*>(base + l.q16);
  void* o16 = io.out_direct ? static_cast<void*>(a.out) : static_cast<void*>(base + l.o16);
  if (!io.q_direct) {
    NarrowKernel<<<Blocks(n), kThreads, 0, s>>>(a.q, a.bf16_io, n, bf16,
                                                static_cast<uint16_t*>(q16));
    TANDEM_RETURN_IF_CUDA_ERROR(cudaGetLastError());
  }

  const fp::PagedKvStrides st = fp::StridesOf(g, a.layer);
  auto* plan = const_cast<int32_t*>(a.plan);
  fi_internal::FiCall c;
  c.q = q16;
  c.o = o16;
  c.lse = reinterpret_cast<float*>(base + l.lse2);
  c.k_data = static_cast<char*>(a.pool.base) + st.k_offset * g.elem_bytes();
  c.v_data = static_cast<char*>(a.pool.base) + st.v_offset * g.elem_bytes();
  c.strides[0] = st.stride_page;
  c.strides[1] = st.stride_h;
  c.strides[2] = st.stride_n;
  c.block_size = g.block_size;
  c.num_kv_heads = g.num_kv_heads;
  c.num_q_heads = a.num_q_heads;
  c.num_sequences = a.num_sequences;
  c.num_ctas = a.num_ctas;
  c.num_rows = a.num_rows;
  c.sm_scale = a.scale;
  c.qo_indptr = plan + a.layout.qo_indptr;
  c.kv_indptr = plan + a.layout.kv_indptr;
  c.kv_indices = plan + a.layout.kv_indices;
  c.last_page_len = plan + a.layout.last_page_len;
  c.request = plan + a.layout.request;
  c.q_tile = plan + a.layout.q_tile;
  c.kv_tile = plan + a.layout.kv_tile;
  c.o_indptr = plan + a.layout.o_indptr;
  c.kv_chunk = plan + a.layout.kv_chunk;
  if (partition) {
    c.tmp_v = base + l.tmp_v;
    c.tmp_s = reinterpret_cast<float*>(base + l.tmp_s);
  }
  if (absl::Status st2 = EntryFor(a.kernel, g.dtype, g.head_dim)(c, s); !st2.ok()) return st2;

  FinishRowsKernel<<<Blocks(n), kThreads, 0, s>>>(
      static_cast<const uint16_t*>(o16), reinterpret_cast<const float*>(base + l.lse2),
      plan + a.layout.row_keys, a.num_rows, a.num_q_heads, g.head_dim, bf16, a.bf16_io, a.out,
      a.lse);
  return ToStatus(cudaGetLastError(), "flashinfer: finish rows");
}

}  // namespace tandem::gpu
