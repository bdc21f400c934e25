#include "model/cpu/cpu_ops.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/parallel_for.h"

namespace tandem::cpu {
namespace {

// Rows per parallel chunk: enough work per chunk that scheduling is negligible.
int64_t RowGrain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)); }

}  // namespace

void RmsNorm(const float* x, const float* w, int64_t m, int64_t n, float eps, float* y) {
  ParallelFor(m, RowGrain(n), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* xi = x + i * n;
      float* yi = y + i * n;
      double ss = 0.0;
      for (int64_t j = 0; j < n; ++j) ss += static_cast<double>(xi[j]) * xi[j];
      const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
      for (int64_t j = 0; j < n; ++j) yi[j] = xi[j] * scale * w[j];
    }
  });
}

void Rope(float* x, int64_t m, int32_t heads, int32_t head_dim, const int64_t* positions,
          const RopeParams& params) {
  const int32_t half = head_dim / 2;
  std::vector<double> inv_freq(half);
  for (int32_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(static_cast<double>(params.theta), -2.0 * i / head_dim);
  }
  ParallelFor(m, 8, [&](int64_t begin, int64_t end) {
    std::vector<float> cos_v(half), sin_v(half);
    for (int64_t r = begin; r < end; ++r) {
      const double pos = static_cast<double>(positions[r]);
      for (int32_t i = 0; i < half; ++i) {
        const double angle = pos * inv_freq[i];
        cos_v[i] = static_cast<float>(std::cos(angle));
        sin_v[i] = static_cast<float>(std::sin(angle));
      }
      for (int32_t h = 0; h < heads; ++h) {
        float* v = x + (r * heads + h) * head_dim;
        if (params.style == RopeStyle::kAdjacentPairs) {
          for (int32_t i = 0; i < half; ++i) {
            const float a = v[2 * i], b = v[2 * i + 1];
            v[2 * i] = a * cos_v[i] - b * sin_v[i];
            v[2 * i + 1] = a * sin_v[i] + b * cos_v[i];
          }
        } else {
          for (int32_t i = 0; i < half; ++i) {
            const float a = v[i], b = v[i + half];
            v[i] = a * cos_v[i] - b * sin_v[i];
            v[i + half] = a * sin_v[i] + b * cos_v[i];
          }
        }
      }
    }
  });
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  ParallelFor(n, 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float g = gate[i];
      out[i] = g / (1.f + std::exp(-g)) * up[i];
    }
  });
}

void Add(float* x, const float* y, int64_t n) {
  ParallelFor(n, 65536, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] += y[i];
  });
}

void GatherRows(const float* src, const int64_t* index, int64_t m, int64_t cols, float* dst) {
  ParallelFor(m, RowGrain(cols), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (index[i] < 0) {
        std::memset(dst + i * cols, 0, cols * sizeof(float));
      } else {
        std::memcpy(dst + i * cols, src + index[i] * cols, cols * sizeof(float));
      }
    }
  });
}

}  // namespace tandem::cpu
