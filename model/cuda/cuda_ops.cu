// Element-wise and row-wise kernels (see cuda_ops.h). Each mirrors the CPU loop of
// model/cpu/cpu_ops.cc: the same expression order in float, the same double-precision parts.
#include <cuda_runtime.h>
#include <math.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "attention/kv_dtype.h"
#include "common/cuda/cuda_status.h"
#include "model/cuda/cuda_ops.h"

namespace tandem::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // element kernels grid-stride beyond this

unsigned ElementBlocks(int64_t n) {
  return static_cast<unsigned>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

#define TANDEM_GRID_STRIDE(i, n)                                            \
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

__global__ void __launch_bounds__(kThreads)
    RmsNormKernel(const float* x, const float* w, int64_t n, float eps, float* y) {
  __shared__ double partial[kThreads];
  const int64_t row = blockIdx.x;
  const float* xi = x + row * n;
  float* yi = y + row * n;
  double ss = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) ss += static_cast<double>(xi[j]) * xi[j];
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  // Every thread has read its x values above and the barrier orders those reads before any
  // write below, so y may alias x.
  const float scale = static_cast<float>(1.0 / sqrt(partial[0] / static_cast<double>(n) + eps));
  for (int64_t j = threadIdx.x; j < n; j += kThreads) yi[j] = xi[j] * scale * w[j];
}

// residual += x, then out = RMSNorm(residual) · w: RmsNormKernel over the sums, which each thread
// keeps in residual and reads back itself (same elements, same order of the sum of squares as
// LaunchAdd followed by LaunchRmsNorm). x is read before the barrier, so out may alias it.
__global__ void __launch_bounds__(kThreads)
    AddRmsNormKernel(float* residual, const float* x, const float* w, int64_t n, float eps,
                     float* out) {
  __shared__ double partial[kThreads];
  const int64_t row = blockIdx.x;
  float* ri = residual + row * n;
  const float* xi = x + row * n;
  float* oi = out + row * n;
  double ss = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float r = ri[j] + xi[j];
    ri[j] = r;
    ss += static_cast<double>(r) * r;
  }
  partial[threadIdx.x] = ss;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const float scale = static_cast<float>(1.0 / sqrt(partial[0] / static_cast<double>(n) + eps));
  for (int64_t j = threadIdx.x; j < n; j += kThreads) oi[j] = ri[j] * scale * w[j];
}

// RoPE frequency divisors passed by value (kernel parameters), so no device buffer is needed.
constexpr int32_t kMaxRopeFactors = 256;
struct RopeFactors {
  float v[kMaxRopeFactors];
};

// One thread per (row, frequency i): computes the angle once, rotates that pair in every head.
__global__ void __launch_bounds__(kThreads)
    RopeKernel(float* x, int64_t m, int32_t heads, int32_t head_dim, const int64_t* positions,
               float theta, bool adjacent_pairs, bool has_factors, RopeFactors factors,
               float mscale) {
  const int32_t half = head_dim / 2;
  TANDEM_GRID_STRIDE(e, m * half) {
    const int64_t r = e / half;
    const int32_t i = static_cast<int32_t>(e % half);
    double inv_freq = pow(static_cast<double>(theta), -2.0 * i / head_dim);
    if (has_factors) inv_freq /= static_cast<double>(factors.v[i]);
    const double angle = static_cast<double>(positions[r]) * inv_freq;
    const float c = static_cast<float>(mscale * cos(angle));
    const float s = static_cast<float>(mscale * sin(angle));
    for (int32_t h = 0; h < heads; ++h) {
      float* v = x + (r * heads + h) * head_dim;
      const int32_t ia = adjacent_pairs ? 2 * i : i;
      const int32_t ib = adjacent_pairs ? 2 * i + 1 : i + half;
      const float a = v[ia], b = v[ib];
      v[ia] = a * c - b * s;
      v[ib] = a * s + b * c;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    SiluMulKernel(const float* gate, const float* up, int64_t n, float* out) {
  TANDEM_GRID_STRIDE(i, n) {
    const float g = gate[i];
    out[i] = g / (1.f + expf(-g)) * up[i];
  }
}

__global__ void __launch_bounds__(kThreads) AddKernel(float* x, const float* y, int64_t n) {
  TANDEM_GRID_STRIDE(i, n) { x[i] += y[i]; }
}

template <typename Index>
__global__ void __launch_bounds__(kThreads)
    GatherKernel(const float* src, const Index* index, int64_t m, int64_t cols, float* dst) {
  TANDEM_GRID_STRIDE(e, m * cols) {
    const int64_t row = index[e / cols];
    dst[e] = row < 0 ? 0.f : src[row * cols + e % cols];
  }
}

__global__ void __launch_bounds__(kThreads) ToBf16Kernel(const float* x, int64_t n, uint16_t* y) {
  TANDEM_GRID_STRIDE(i, n) { y[i] = FloatToBf16(x[i]); }
}

__global__ void __launch_bounds__(kThreads)
    AddBiasKernel(float* y, const float* bias, int64_t m, int64_t n) {
  TANDEM_GRID_STRIDE(e, m * n) { y[e] += bias[e % n]; }
}

#undef TANDEM_GRID_STRIDE

absl::Status CheckSizes(const char* op, int64_t a, int64_t b) {
  if (a < 0 || b < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": negative size (", a, ", ", b, ")"));
  }
  return absl::OkStatus();
}

absl::Status LaunchStatus() { return ToStatus(cudaGetLastError(), "kernel launch"); }

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace

absl::Status LaunchRmsNorm(const float* x, const float* w, int64_t m, int64_t n, float eps,
                           float* y, void* stream) {
  if (absl::Status s = CheckSizes("rms_norm", m, n); !s.ok()) return s;
  if (m > INT32_MAX) return absl::InvalidArgumentError(absl::StrCat("rms_norm: ", m, " rows"));
  if (m == 0 || n == 0) return absl::OkStatus();
  RmsNormKernel<<<static_cast<unsigned>(m), kThreads, 0, S(stream)>>>(x, w, n, eps, y);
  return LaunchStatus();
}

absl::Status LaunchAddRmsNorm(float* residual, const float* x, const float* w, int64_t m, int64_t n,
                              float eps, float* out, void* stream) {
  if (absl::Status s = CheckSizes("add_rms_norm", m, n); !s.ok()) return s;
  if (m > INT32_MAX) return absl::InvalidArgumentError(absl::StrCat("add_rms_norm: ", m, " rows"));
  if (m == 0 || n == 0) return absl::OkStatus();
  AddRmsNormKernel<<<static_cast<unsigned>(m), kThreads, 0, S(stream)>>>(residual, x, w, n, eps,
                                                                         out);
  return LaunchStatus();
}

absl::Status LaunchRope(float* x, int64_t m, int32_t heads, int32_t head_dim,
                        const int64_t* positions, const RopeParams& params, void* stream) {
  if (absl::Status s = CheckSizes("rope", m, int64_t{heads} * head_dim); !s.ok()) return s;
  if (heads < 0 || head_dim < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope: negative heads (", heads, ") or head_dim (", head_dim, ")"));
  }
  RopeFactors factors{};
  if (params.freq_factors != nullptr) {
    if (head_dim / 2 > kMaxRopeFactors) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rope: head_dim ", head_dim, " with frequency factors exceeds ", 2 * kMaxRopeFactors));
    }
    std::copy_n(params.freq_factors, head_dim / 2, factors.v);
  }
  const int64_t pairs = m * (head_dim / 2);
  if (pairs == 0 || heads == 0) return absl::OkStatus();
  RopeKernel<<<ElementBlocks(pairs), kThreads, 0, S(stream)>>>(
      x, m, heads, head_dim, positions, params.theta, params.style == RopeStyle::kAdjacentPairs,
      params.freq_factors != nullptr, factors, params.mscale);
  return LaunchStatus();
}

absl::Status LaunchSiluMul(const float* gate, const float* up, int64_t n, float* out,
                           void* stream) {
  if (absl::Status s = CheckSizes("silu_mul", n, 0); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  SiluMulKernel<<<ElementBlocks(n), kThreads, 0, S(stream)>>>(gate, up, n, out);
  return LaunchStatus();
}

absl::Status LaunchAdd(float* x, const float* y, int64_t n, void* stream) {
  if (absl::Status s = CheckSizes("add", n, 0); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  AddKernel<<<ElementBlocks(n), kThreads, 0, S(stream)>>>(x, y, n);
  return LaunchStatus();
}

absl::Status LaunchGatherRows(const float* src, const int64_t* index, int64_t m, int64_t cols,
                              float* dst, void* stream) {
  if (absl::Status s = CheckSizes("gather_rows", m, cols); !s.ok()) return s;
  if (m == 0 || cols == 0) return absl::OkStatus();
  GatherKernel<int64_t>
      <<<ElementBlocks(m * cols), kThreads, 0, S(stream)>>>(src, index, m, cols, dst);
  return LaunchStatus();
}

absl::Status LaunchEmbedding(const float* table, const int32_t* ids, int64_t m, int64_t hidden,
                             float* out, void* stream) {
  if (absl::Status s = CheckSizes("embedding", m, hidden); !s.ok()) return s;
  if (m == 0 || hidden == 0) return absl::OkStatus();
  GatherKernel<int32_t>
      <<<ElementBlocks(m * hidden), kThreads, 0, S(stream)>>>(table, ids, m, hidden, out);
  return LaunchStatus();
}

absl::Status LaunchToBf16(const float* x, int64_t n, uint16_t* y, void* stream) {
  if (absl::Status s = CheckSizes("to_bf16", n, 0); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  ToBf16Kernel<<<ElementBlocks(n), kThreads, 0, S(stream)>>>(x, n, y);
  return LaunchStatus();
}

absl::Status LaunchAddBias(float* y, const float* bias, int64_t m, int64_t n, void* stream) {
  if (absl::Status s = CheckSizes("add_bias", m, n); !s.ok()) return s;
  if (m == 0 || n == 0) return absl::OkStatus();
  AddBiasKernel<<<ElementBlocks(m * n), kThreads, 0, S(stream)>>>(y, bias, m, n);
  return LaunchStatus();
}

}  // namespace tandem::gpu
