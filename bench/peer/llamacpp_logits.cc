// llamacpp-logits: llama.cpp's own logits for a token sequence, the oracle of Tandem's forward
// checks (bench/peer/reference_logits.sh builds it against the llama.cpp of the PyPI sdist that
// bench/peer/build_llamacpp.sh builds, and writes the fixtures tests/engine reads).
//
//   llamacpp-logits MODEL.gguf "t0 t1 ..." GREEDY_STEPS POS[,POS...]
//
// Decodes the prompt in one batch (logits for every position), then GREEDY_STEPS greedy tokens
// one at a time. Prints, on stdout:
//   prompt: t0 t1 ...
//   greedy: g0 g1 ...               (argmax after the prompt, then after each greedy token)
//   logits POS: v0 v1 ... v_{vocab-1}  (for each requested prompt position, %.9g)
// The KV cache is F32 and flash attention off, so llama.cpp computes in f32 throughout.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

void Quiet(enum ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

int Argmax(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: llamacpp-logits MODEL \"t0 t1 ...\" GREEDY_STEPS POS[,POS...]\n");
    return 2;
  }
  std::vector<llama_token> prompt;
  {
    std::istringstream in(argv[2]);
    for (int t; in >> t;) prompt.push_back(t);
  }
  const int steps = std::atoi(argv[3]);
  std::vector<int> positions;
  {
    std::string list = argv[4];
    std::istringstream in(list);
    for (std::string p; std::getline(in, p, ',');) positions.push_back(std::atoi(p.c_str()));
  }
  if (prompt.empty() || steps < 0) {
    std::fprintf(stderr, "llamacpp-logits: empty prompt or negative step count\n");
    return 2;
  }
  llama_log_set(Quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.progress_callback = [](float, void*) { return true; };  // no progress dots
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) {
    std::fprintf(stderr, "llamacpp-logits: cannot load %s\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = 256;
  cp.n_ubatch = 256;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::fprintf(stderr, "llamacpp-logits: cannot create a context\n");
    return 1;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const int n = static_cast<int>(prompt.size());
  llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    batch.token[i] = prompt[i];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = n;
  if (llama_decode(ctx, batch) != 0) {
    std::fprintf(stderr, "llamacpp-logits: decode of the prompt failed\n");
    return 1;
  }
  std::vector<std::vector<float>> rows(n);
  for (int i = 0; i < n; ++i) {
    const float* l = llama_get_logits_ith(ctx, i);
    rows[i].assign(l, l + vocab);
  }
  std::vector<int> greedy = {Argmax(rows[n - 1].data(), vocab)};
  for (int s = 1; s < steps; ++s) {
    llama_batch one = llama_batch_init(1, 0, 1);
    one.token[0] = greedy.back();
    one.pos[0] = n + s - 1;
    one.n_seq_id[0] = 1;
    one.seq_id[0][0] = 0;
    one.logits[0] = 1;
    one.n_tokens = 1;
    if (llama_decode(ctx, one) != 0) {
      std::fprintf(stderr, "llamacpp-logits: decode step %d failed\n", s);
      return 1;
    }
    greedy.push_back(Argmax(llama_get_logits_ith(ctx, 0), vocab));
    llama_batch_free(one);
  }
  std::printf("prompt:");
  for (const llama_token t : prompt) std::printf(" %d", t);
  std::printf("\ngreedy:");
  for (const int t : greedy) std::printf(" %d", t);
  std::printf("\n");
  for (const int p : positions) {
    if (p < 0 || p >= n) {
      std::fprintf(stderr, "llamacpp-logits: position %d outside the prompt\n", p);
      return 2;
    }
    std::printf("logits %d:", p);
    for (const float v : rows[p]) std::printf(" %.9g", v);
    std::printf("\n");
  }
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
