#include "model/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "attention/cpu/cpu_isa.h"
#include "common/parallel_for.h"
#include "model/cpu/silu_simd.h"

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
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < n; ++j) ss += static_cast<double>(xi[j]) * xi[j];
      const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) yi[j] = xi[j] * scale * w[j];
    }
  });
}

void RopeTable::Ensure(int64_t max_position, int32_t head_dim, float theta,
                       const float* freq_factors, float mscale) {
  const int32_t half = head_dim / 2;
  const bool same_factors = freq_factors == nullptr
                                ? factors_.empty()
                                : (factors_.size() == static_cast<size_t>(half) &&
                                   std::equal(factors_.begin(), factors_.end(), freq_factors));
  if (half != half_ || theta != theta_ || mscale != mscale_ || !same_factors) {
    half_ = half;
    theta_ = theta;
    mscale_ = mscale;
    if (freq_factors == nullptr) {
      factors_.clear();
    } else {
      factors_.assign(freq_factors, freq_factors + half);
    }
    capacity_ = 0;
    cos_.clear();
    sin_.clear();
  }
  if (max_position < capacity_) return;
  // Grow geometrically so a decode stream extends the table rarely.
  const int64_t capacity = std::max<int64_t>(max_position + 1, capacity_ * 2);
  cos_.resize(capacity * half);
  sin_.resize(capacity * half);
  for (int64_t pos = capacity_; pos < capacity; ++pos) {
    for (int32_t i = 0; i < half; ++i) {
      double inv_freq = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
      if (!factors_.empty()) inv_freq /= static_cast<double>(factors_[i]);
      const double angle = static_cast<double>(pos) * inv_freq;
      cos_[pos * half + i] = static_cast<float>(mscale * std::cos(angle));
      sin_[pos * half + i] = static_cast<float>(mscale * std::sin(angle));
    }
  }
  capacity_ = capacity;
}

void Rope(float* x, int64_t m, int32_t heads, int32_t head_dim, const int64_t* positions,
          RopeStyle style, const RopeTable& table) {
  const int32_t half = head_dim / 2;
  ParallelFor(m, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      // A padding row (position −1, rank_model.cc) is left as it is: it has no angle, its values
      // reach nothing, and the table has no row before position 0.
      if (positions[r] < 0) continue;
      const float* c = table.cos(positions[r]);
      const float* sn = table.sin(positions[r]);
      for (int32_t h = 0; h < heads; ++h) {
        float* v = x + (r * heads + h) * head_dim;
        if (style == RopeStyle::kAdjacentPairs) {
          for (int32_t i = 0; i < half; ++i) {
            const float a = v[2 * i], b = v[2 * i + 1];
            v[2 * i] = a * c[i] - b * sn[i];
            v[2 * i + 1] = a * sn[i] + b * c[i];
          }
        } else {
#pragma omp simd
          for (int32_t i = 0; i < half; ++i) {
            const float a = v[i], b = v[i + half];
            v[i] = a * c[i] - b * sn[i];
            v[i + half] = a * sn[i] + b * c[i];
          }
        }
      }
    }
  });
}

void SiluMulOnPath(CpuIsa isa, const float* gate, const float* up, int64_t begin, int64_t end,
                   float* out) {
  switch (isa) {
    case CpuIsa::kAvx512:
      SiluMulAvx512(gate, up, begin, end, out);
      return;
    case CpuIsa::kAvx2:
      SiluMulAvx2(gate, up, begin, end, out);
      return;
    case CpuIsa::kPortable:
      break;
  }
  for (int64_t i = begin; i < end; ++i) {
    const float g = gate[i];
    out[i] = g / (1.f + std::exp(-g)) * up[i];
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  const CpuIsa isa = ActiveCpuIsa();
  ParallelFor(n, 16384,
              [&](int64_t begin, int64_t end) { SiluMulOnPath(isa, gate, up, begin, end, out); });
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
