// bf16-activation kernels (see cuda_ops_bf16.h). fp32 inside, one bf16 rounding per output.
#include <cuda_runtime.h>
#include <math.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "attention/kv_dtype.h"
#include "common/cuda/cuda_status.h"
#include "model/cuda/cuda_ops_bf16.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;

unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

#define TANDEM_GRID_STRIDE(i, n)                                            \
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

__device__ float Ld(const uint16_t* p, int64_t i) { return Bf16ToFloat(p[i]); }

// One CTA per row: fp32 sum of squares, warp shuffles then one shared-memory pass.
__global__ void __launch_bounds__(kThreads)
    RmsNormBf16Kernel(const uint16_t* x, const float* w, int64_t n, float eps, uint16_t* y) {
  __shared__ float warp_sums[kThreads / 32];
  const int64_t row = blockIdx.x;
  const uint16_t* xi = x + row * n;
  uint16_t* yi = y + row * n;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float v = Ld(xi, j);
    ss = fmaf(v, v, ss);
  }
  for (int off = 16; off > 0; off /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < kThreads / 32; ++i) total += warp_sums[i];
  // All reads of x happened before the barrier: y may alias x.
  const float scale = rsqrtf(total / static_cast<float>(n) + eps);
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    yi[j] = FloatToBf16(Ld(xi, j) * scale * w[j]);
  }
}

constexpr int32_t kMaxRopeFactors = 256;
struct RopeFactors {
  float v[kMaxRopeFactors];
};

// One thread per (row, head, pair): enough threads for a batch-1 step (heads × head_dim/2).
__global__ void __launch_bounds__(kThreads)
    RopeBf16Kernel(uint16_t* x, int64_t m, int32_t heads, int32_t head_dim,
                   const int64_t* positions, float theta, bool adjacent_pairs, bool has_factors,
                   RopeFactors factors, float mscale) {
  const int32_t half = head_dim / 2;
  TANDEM_GRID_STRIDE(e, m * heads * half) {
    const int32_t i = static_cast<int32_t>(e % half);
    const int64_t rh = e / half;  // row * heads + head
    const int64_t r = rh / heads;
    double inv_freq = pow(static_cast<double>(theta), -2.0 * i / head_dim);
    if (has_factors) inv_freq /= static_cast<double>(factors.v[i]);
    const double angle = static_cast<double>(positions[r]) * inv_freq;
    const float c = static_cast<float>(mscale * cos(angle));
    const float s = static_cast<float>(mscale * sin(angle));
    uint16_t* v = x + rh * head_dim;
    const int32_t ia = adjacent_pairs ? 2 * i : i;
    const int32_t ib = adjacent_pairs ? 2 * i + 1 : i + half;
    const float a = Bf16ToFloat(v[ia]), b = Bf16ToFloat(v[ib]);
    v[ia] = FloatToBf16(a * c - b * s);
    v[ib] = FloatToBf16(a * s + b * c);
  }
}

__global__ void __launch_bounds__(kThreads)
    SiluMulBf16Kernel(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out) {
  TANDEM_GRID_STRIDE(i, n) {
    const float g = Ld(gate, i);
    out[i] = FloatToBf16(g / (1.f + expf(-g)) * Ld(up, i));
  }
}

__global__ void __launch_bounds__(kThreads)
    AddBf16Kernel(uint16_t* x, const uint16_t* y, int64_t n) {
  TANDEM_GRID_STRIDE(i, n) { x[i] = FloatToBf16(Ld(x, i) + Ld(y, i)); }
}

__global__ void __launch_bounds__(kThreads)
    GatherBf16Kernel(const uint16_t* src, const int64_t* index, int64_t m, int64_t cols,
                     uint16_t* dst) {
  TANDEM_GRID_STRIDE(e, m * cols) {
    const int64_t row = index[e / cols];
    dst[e] = row < 0 ? uint16_t{0} : src[row * cols + e % cols];
  }
}

__global__ void __launch_bounds__(kThreads)
    EmbeddingBf16Kernel(const float* table, const int32_t* ids, int64_t m, int64_t hidden,
                        uint16_t* out) {
  TANDEM_GRID_STRIDE(e, m * hidden) {
    out[e] = FloatToBf16(table[int64_t{ids[e / hidden]} * hidden + e % hidden]);
  }
}

__global__ void __launch_bounds__(kThreads)
    Bf16ToF32Kernel(const uint16_t* x, int64_t n, float* y) {
  TANDEM_GRID_STRIDE(i, n) { y[i] = Ld(x, i); }
}

__global__ void __launch_bounds__(kThreads)
    AddBiasBf16Kernel(uint16_t* y, const float* bias, int64_t m, int64_t n) {
  TANDEM_GRID_STRIDE(e, m * n) { y[e] = FloatToBf16(Ld(y, e) + bias[e % n]); }
}

#undef TANDEM_GRID_STRIDE

absl::Status Check(const char* op, int64_t a, int64_t b) {
  if (a < 0 || b < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": negative size (", a, ", ", b, ")"));
  }
  return absl::OkStatus();
}

absl::Status Launched() { return ToStatus(cudaGetLastError(), "kernel launch"); }

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

absl::Status LaunchRmsNormBf16(const uint16_t* x, const float* w, int64_t m, int64_t n, float eps,
                               uint16_t* y, void* stream) {
  if (absl::Status s = Check("rms_norm_bf16", m, n); !s.ok()) return s;
  if (m > INT32_MAX) return absl::InvalidArgumentError(absl::StrCat("rms_norm_bf16: ", m, " rows"));
  if (m == 0 || n == 0) return absl::OkStatus();
  RmsNormBf16Kernel<<<static_cast<unsigned>(m), kThreads, 0, S(stream)>>>(x, w, n, eps, y);
  return Launched();
}

absl::Status LaunchRopeBf16(uint16_t* x, int64_t m, int32_t heads, int32_t head_dim,
                            const int64_t* positions, const RopeParams& params, void* stream) {
  if (heads < 0 || head_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_bf16: negative heads (", heads, ") or head_dim (", head_dim, ")"));
  }
  if (absl::Status s = Check("rope_bf16", m, int64_t{heads} * head_dim); !s.ok()) return s;
  RopeFactors factors{};
  if (params.freq_factors != nullptr) {
    if (head_dim / 2 > kMaxRopeFactors) {
      return absl::InvalidArgumentError(absl::StrCat("rope_bf16: head_dim ", head_dim,
                                                     " with frequency factors exceeds ",
                                                     2 * kMaxRopeFactors));
    }
    std::copy_n(params.freq_factors, head_dim / 2, factors.v);
  }
  const int64_t work = m * heads * (head_dim / 2);
  if (work == 0) return absl::OkStatus();
  RopeBf16Kernel<<<Blocks(work), kThreads, 0, S(stream)>>>(
      x, m, heads, head_dim, positions, params.theta, params.style == RopeStyle::kAdjacentPairs,
      params.freq_factors != nullptr, factors, params.mscale);
  return Launched();
}

absl::Status LaunchSiluMulBf16(const uint16_t* gate, const uint16_t* up, int64_t n, uint16_t* out,
                               void* stream) {
  if (absl::Status s = Check("silu_mul_bf16", n, 0); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  SiluMulBf16Kernel<<<Blocks(n), kThreads, 0, S(stream)>>>(gate, up, n, out);
  return Launched();
}

absl::Status LaunchAddBf16(uint16_t* x, const uint16_t* y, int64_t n, void* stream) {
  if (absl::Status s = Check("add_bf16", n, 0); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  AddBf16Kernel<<<Blocks(n), kThreads, 0, S(stream)>>>(x, y, n);
  return Launched();
}

absl::Status LaunchGatherRowsBf16(const uint16_t* src, const int64_t* index, int64_t m,
                                  int64_t cols, uint16_t* dst, void* stream) {
  if (absl::Status s = Check("gather_rows_bf16", m, cols); !s.ok()) return s;
  if (m == 0 || cols == 0) return absl::OkStatus();
  GatherBf16Kernel<<<Blocks(m * cols), kThreads, 0, S(stream)>>>(src, index, m, cols, dst);
  return Launched();
}

absl::Status LaunchEmbeddingBf16(const float* table, const int32_t* ids, int64_t m, int64_t hidden,
                                 uint16_t* out, void* stream) {
  if (absl::Status s = Check("embedding_bf16", m, hidden); !s.ok()) return s;
  if (m == 0 || hidden == 0) return absl::OkStatus();
  EmbeddingBf16Kernel<<<Blocks(m * hidden), kThreads, 0, S(stream)>>>(table, ids, m, hidden, out);
  return Launched();
}

absl::Status LaunchBf16ToF32(const uint16_t* x, int64_t n, float* y, void* stream) {
  if (absl::Status s = Check("bf16_to_f32", n, 0); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  Bf16ToF32Kernel<<<Blocks(n), kThreads, 0, S(stream)>>>(x, n, y);
  return Launched();
}

absl::Status LaunchAddBiasBf16(uint16_t* y, const float* bias, int64_t m, int64_t n, void* stream) {
  if (absl::Status s = Check("add_bias_bf16", m, n); !s.ok()) return s;
  if (m == 0 || n == 0) return absl::OkStatus();
  AddBiasBf16Kernel<<<Blocks(m * n), kThreads, 0, S(stream)>>>(y, bias, m, n);
  return Launched();
}

}  // namespace tandem::gpu
