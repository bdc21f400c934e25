#include "engine/rank_weights.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem {

absl::StatusOr<std::shared_ptr<const void>> WeightCache::GetOrPrepare(const std::string& key,
                                                                      const Prepare& prepare) {
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<Entry>& slot = entries_[key];
    if (slot == nullptr) slot = std::make_shared<Entry>();
    entry = slot;
  }
  std::call_once(entry->once, [&] { entry->value = prepare(); });
  return entry->value;
}

int64_t SliceBegin(int64_t total, int32_t t, int32_t tp) { return total * t / tp; }
int64_t SliceCount(int64_t total, int32_t t, int32_t tp) {
  return SliceBegin(total, t + 1, tp) - SliceBegin(total, t, tp);
}

namespace {

// Rows [row_begin, row_begin+rows) and columns [col_begin, col_begin+cols) of a [R][C] matrix,
// zero-padded to `padded_rows` rows.
std::vector<float> SubMatrix(const Tensor& t, int64_t row_begin, int64_t rows, int64_t col_begin,
                             int64_t cols, int64_t padded_rows) {
  const int64_t c_total = t.dim(1);
  std::vector<float> out(padded_rows * cols, 0.f);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out.data() + r * cols, t.data.data() + (row_begin + r) * c_total + col_begin,
                cols * sizeof(float));
  }
  return out;
}

class Preparer {
 public:
  Preparer(ComputeBackend& backend, WeightCache& cache)
      : backend_(backend), cache_(cache), prefix_(backend.device_key() + "/") {}

  // Linear over rows [rb, rb+rows) x cols [cb, cb+cols) of w (+ bias rows), padded to pad_rows.
  absl::StatusOr<std::shared_ptr<const LinearOp>> Linear(const std::string& name, const Tensor& w,
                                                         const Tensor* bias, int64_t rb,
                                                         int64_t rows, int64_t cb, int64_t cols,
                                                         int64_t pad_rows) {
    const std::string key =
        absl::StrCat(prefix_, name, "[", rb, "+", rows, "][", cb, "+", cols, "]p", pad_rows);
    TANDEM_ASSIGN_OR_RETURN(
        std::shared_ptr<const void> v,
        cache_.GetOrPrepare(key, [&]() -> absl::StatusOr<std::shared_ptr<const void>> {
          const std::vector<float> sub = SubMatrix(w, rb, rows, cb, cols, pad_rows);
          std::vector<float> b;
          if (bias != nullptr && !bias->empty()) {
            b.assign(pad_rows, 0.f);
            std::copy(bias->data.begin() + rb, bias->data.begin() + rb + rows, b.begin());
          }
          TANDEM_ASSIGN_OR_RETURN(
              std::unique_ptr<LinearOp> op,
              backend_.PrepareLinear(sub.data(), pad_rows, cols, b.empty() ? nullptr : b.data()));
          return std::shared_ptr<const void>(std::shared_ptr<const LinearOp>(std::move(op)));
        }));
    return std::static_pointer_cast<const LinearOp>(v);
  }

  absl::StatusOr<std::shared_ptr<const DeviceBuffer>> Buffer(const std::string& name,
                                                             const Tensor& t) {
    TANDEM_ASSIGN_OR_RETURN(
        std::shared_ptr<const void> v,
        cache_.GetOrPrepare(prefix_ + name, [&]() -> absl::StatusOr<std::shared_ptr<const void>> {
          const int64_t bytes = t.numel() * static_cast<int64_t>(sizeof(float));
          TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceBuffer> buf, backend_.Allocate(bytes));
          TANDEM_RETURN_IF_ERROR(backend_.Upload(buf->data(), t.data.data(), bytes));
          return std::shared_ptr<const void>(std::shared_ptr<const DeviceBuffer>(std::move(buf)));
        }));
    return std::static_pointer_cast<const DeviceBuffer>(v);
  }

 private:
  ComputeBackend& backend_;
  WeightCache& cache_;
  const std::string prefix_;
};

}  // namespace

absl::StatusOr<RankWeights> PrepareRankWeights(const LlamaWeights& weights,
                                               const ParallelConfig& parallel,
                                               const RankPlacement& p, ComputeBackend& backend,
                                               WeightCache& cache) {
  const LlamaConfig& c = weights.config;
  const int64_t d = c.head_dim;
  const int32_t tp = parallel.tp;
  Preparer prep(backend, cache);
  RankWeights out;
  TANDEM_ASSIGN_OR_RETURN(out.embedding, prep.Buffer("token_embd", weights.token_embedding));
  TANDEM_ASSIGN_OR_RETURN(out.output_norm, prep.Buffer("output_norm", weights.output_norm));
  out.vocab_begin = SliceBegin(c.vocab_size, p.tp_rank, tp);
  out.vocab_count = SliceCount(c.vocab_size, p.tp_rank, tp);
  out.vocab_slice_max = (c.vocab_size + tp - 1) / tp;
  TANDEM_ASSIGN_OR_RETURN(out.lm_head,
                          prep.Linear("lm_head", weights.lm_head(), nullptr, out.vocab_begin,
                                      out.vocab_count, 0, c.hidden_size, out.vocab_slice_max));
  out.intermediate_begin = SliceBegin(c.intermediate_size, p.tp_rank, tp);
  out.intermediate_count = SliceCount(c.intermediate_size, p.tp_rank, tp);
  const int64_t qb = p.q_head_begin * d, qn = p.q_head_count * d;
  const int64_t kb = p.kv_head_begin * d, kn = p.kv_head_count * d;
  const int64_t ib = out.intermediate_begin, in = out.intermediate_count;
  const int64_t h = c.hidden_size;
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LlamaLayerWeights& lw = weights.layers[l];
    const std::string n = absl::StrCat("blk.", l, ".");
    RankLayerWeights rl;
    TANDEM_ASSIGN_OR_RETURN(rl.attn_norm, prep.Buffer(n + "attn_norm", lw.attn_norm));
    TANDEM_ASSIGN_OR_RETURN(rl.ffn_norm, prep.Buffer(n + "ffn_norm", lw.ffn_norm));
    TANDEM_ASSIGN_OR_RETURN(rl.wq, prep.Linear(n + "wq", lw.wq, &lw.bq, qb, qn, 0, h, qn));
    TANDEM_ASSIGN_OR_RETURN(rl.wk, prep.Linear(n + "wk", lw.wk, &lw.bk, kb, kn, 0, h, kn));
    TANDEM_ASSIGN_OR_RETURN(rl.wv, prep.Linear(n + "wv", lw.wv, &lw.bv, kb, kn, 0, h, kn));
    TANDEM_ASSIGN_OR_RETURN(rl.wo, prep.Linear(n + "wo", lw.wo, nullptr, 0, h, qb, qn, h));
    TANDEM_ASSIGN_OR_RETURN(rl.w_gate,
                            prep.Linear(n + "w_gate", lw.w_gate, nullptr, ib, in, 0, h, in));
    TANDEM_ASSIGN_OR_RETURN(rl.w_up, prep.Linear(n + "w_up", lw.w_up, nullptr, ib, in, 0, h, in));
    TANDEM_ASSIGN_OR_RETURN(rl.w_down,
                            prep.Linear(n + "w_down", lw.w_down, nullptr, 0, h, ib, in, h));
    out.layers.push_back(std::move(rl));
  }
  return out;
}

}  // namespace tandem
