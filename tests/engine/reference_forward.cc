#include "tests/engine/reference_forward.h"

#include <algorithm>
#include <cmath>

namespace tandem::testing {
namespace {

using Mat = std::vector<std::vector<double>>;

std::vector<double> MatVec(const Tensor& w, const std::vector<double>& x) {
  const int64_t n = w.dim(0), k = w.dim(1);
  std::vector<double> y(n, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double s = 0.0;
    for (int64_t j = 0; j < k; ++j) s += static_cast<double>(w.data[i * k + j]) * x[j];
    y[i] = s;
  }
  return y;
}

std::vector<double> RmsNorm(const std::vector<double>& x, const Tensor& w, double eps) {
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double scale = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * w.data[i];
  return y;
}

void AddBias(std::vector<double>& y, const Tensor& b) {
  if (b.empty()) return;
  for (size_t i = 0; i < y.size(); ++i) y[i] += b.data[i];
}

// RMSNorm of each head's d values with the shared [d] weight (Qwen3's q_norm/k_norm).
void HeadNorm(std::vector<double>& v, int32_t heads, int32_t d, const Tensor& w, double eps) {
  if (w.empty()) return;
  for (int32_t h = 0; h < heads; ++h) {
    const std::vector<double> head(v.begin() + h * d, v.begin() + (h + 1) * d);
    const std::vector<double> normed = RmsNorm(head, w, eps);
    std::copy(normed.begin(), normed.end(), v.begin() + h * d);
  }
}

void Rope(std::vector<double>& v, int32_t heads, int32_t d, int64_t pos, const LlamaConfig& c) {
  for (int32_t h = 0; h < heads; ++h) {
    double* x = v.data() + h * d;
    for (int32_t i = 0; i < d / 2; ++i) {
      // Frequency i is theta^(-2i/d), slowed by its divisor when the model scales RoPE.
      double freq = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / d);
      if (!c.rope_freq_factors.empty()) freq /= c.rope_freq_factors[i];
      const double angle = pos * freq;
      const int32_t a = c.rope_style == RopeStyle::kAdjacentPairs ? 2 * i : i;
      const int32_t b = c.rope_style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + d / 2;
      const double xa = x[a], xb = x[b];
      const double cs = c.rope_mscale * std::cos(angle), sn = c.rope_mscale * std::sin(angle);
      x[a] = xa * cs - xb * sn;
      x[b] = xa * sn + xb * cs;
    }
  }
}

}  // namespace

std::vector<std::vector<double>> ReferenceLogits(const LlamaWeights& w,
                                                 const std::vector<int32_t>& tokens) {
  const LlamaConfig& c = w.config;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int32_t d = c.head_dim, group = c.num_q_heads / c.num_kv_heads;
  Mat x(n, std::vector<double>(c.hidden_size));
  for (int64_t t = 0; t < n; ++t) {
    for (int32_t j = 0; j < c.hidden_size; ++j) {
      x[t][j] = w.token_embedding.data[static_cast<int64_t>(tokens[t]) * c.hidden_size + j];
    }
  }
  for (const LlamaLayerWeights& lw : w.layers) {
    Mat q(n), k(n), v(n);
    for (int64_t t = 0; t < n; ++t) {
      const std::vector<double> h = RmsNorm(x[t], lw.attn_norm, c.rms_norm_eps);
      q[t] = MatVec(lw.wq, h);
      k[t] = MatVec(lw.wk, h);
      v[t] = MatVec(lw.wv, h);
      AddBias(q[t], lw.bq);
      AddBias(k[t], lw.bk);
      AddBias(v[t], lw.bv);
      HeadNorm(q[t], c.num_q_heads, d, lw.q_norm, c.rms_norm_eps);
      HeadNorm(k[t], c.num_kv_heads, d, lw.k_norm, c.rms_norm_eps);
      Rope(q[t], c.num_q_heads, d, t, c);
      Rope(k[t], c.num_kv_heads, d, t, c);
    }
    for (int64_t t = 0; t < n; ++t) {
      std::vector<double> attn(c.num_q_heads * d, 0.0);
      for (int32_t hq = 0; hq < c.num_q_heads; ++hq) {
        const int32_t hk = hq / group;
        std::vector<double> scores(t + 1);
        double mx = -INFINITY;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0.0;
          for (int32_t i = 0; i < d; ++i) dot += q[t][hq * d + i] * k[s][hk * d + i];
          scores[s] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, scores[s]);
        }
        double z = 0.0;
        for (double& sc : scores) z += (sc = std::exp(sc - mx));
        for (int64_t s = 0; s <= t; ++s) {
          for (int32_t i = 0; i < d; ++i) attn[hq * d + i] += scores[s] / z * v[s][hk * d + i];
        }
      }
      const std::vector<double> o = MatVec(lw.wo, attn);
      for (int32_t j = 0; j < c.hidden_size; ++j) x[t][j] += o[j];
      const std::vector<double> h = RmsNorm(x[t], lw.ffn_norm, c.rms_norm_eps);
      std::vector<double> g = MatVec(lw.w_gate, h);
      const std::vector<double> u = MatVec(lw.w_up, h);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const std::vector<double> dn = MatVec(lw.w_down, g);
      for (int32_t j = 0; j < c.hidden_size; ++j) x[t][j] += dn[j];
    }
  }
  Mat logits(n);
  for (int64_t t = 0; t < n; ++t)
    logits[t] = MatVec(w.lm_head(), RmsNorm(x[t], w.output_norm, c.rms_norm_eps));
  return logits;
}

}  // namespace tandem::testing
