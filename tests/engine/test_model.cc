#include "tests/engine/test_model.h"

#include <cmath>
#include <random>

namespace tandem::testing {
namespace {

Tensor Random(std::mt19937_64& rng, std::vector<int64_t> shape, float scale, float offset = 0.f) {
  Tensor t;
  t.shape = shape;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::normal_distribution<float> dist(0.f, 1.f);
  t.data.resize(n);
  for (float& v : t.data) v = offset + scale * dist(rng);
  return t;
}

}  // namespace

LlamaConfig SmallConfig() {
  LlamaConfig c;
  c.name = "test-small";
  c.architecture = "llama";
  c.vocab_size = 320;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_layers = 2;
  c.num_q_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.max_context = 4096;
  c.rope_theta = 10000.f;
  c.rms_norm_eps = 1e-5f;
  c.rope_style = RopeStyle::kAdjacentPairs;
  return c;
}

LlamaWeights RandomWeights(const LlamaConfig& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  LlamaWeights w;
  w.config = c;
  const int64_t h = c.hidden_size, d = c.head_dim;
  const float in_scale = 1.f / std::sqrt(static_cast<float>(h));
  w.token_embedding = Random(rng, {c.vocab_size, h}, 1.f);
  w.output_norm = Random(rng, {h}, 0.1f, 1.f);
  if (!c.tied_embeddings) w.output = Random(rng, {c.vocab_size, h}, 3.f * in_scale);
  for (int32_t l = 0; l < c.num_layers; ++l) {
    LlamaLayerWeights lw;
    lw.attn_norm = Random(rng, {h}, 0.1f, 1.f);
    lw.wq = Random(rng, {c.num_q_heads * d, h}, in_scale);
    lw.wk = Random(rng, {c.num_kv_heads * d, h}, in_scale);
    lw.wv = Random(rng, {c.num_kv_heads * d, h}, in_scale);
    if (c.has_qkv_bias) {
      lw.bq = Random(rng, {c.num_q_heads * d}, 0.1f);
      lw.bk = Random(rng, {c.num_kv_heads * d}, 0.1f);
      lw.bv = Random(rng, {c.num_kv_heads * d}, 0.1f);
    }
    if (c.has_qk_norm) {
      lw.q_norm = Random(rng, {d}, 0.1f, 1.f);
      lw.k_norm = Random(rng, {d}, 0.1f, 1.f);
    }
    lw.wo =
        Random(rng, {h, c.num_q_heads * d}, 1.f / std::sqrt(static_cast<float>(c.num_q_heads * d)));
    lw.ffn_norm = Random(rng, {h}, 0.1f, 1.f);
    lw.w_gate = Random(rng, {c.intermediate_size, h}, in_scale);
    lw.w_up = Random(rng, {c.intermediate_size, h}, in_scale);
    lw.w_down = Random(rng, {h, c.intermediate_size},
                       1.f / std::sqrt(static_cast<float>(c.intermediate_size)));
    w.layers.push_back(std::move(lw));
  }
  return w;
}

}  // namespace tandem::testing
