#include "engine/rank_weights.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "model/format/dequant.h"

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
// zero-padded to `padded_rows` rows, as f32 (a quantised tensor's rows are dequantised).
absl::StatusOr<std::vector<float>> SubMatrix(const Tensor& t, int64_t row_begin, int64_t rows,
                                             int64_t col_begin, int64_t cols, int64_t padded_rows) {
  const int64_t c_total = t.dim(1);
  std::vector<float> out(padded_rows * cols, 0.f);
  std::vector<float> row;
  if (t.quantized()) row.resize(c_total);
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = t.data.data() + (row_begin + r) * c_total;
    if (t.quantized()) {
      const int64_t row_bytes = static_cast<int64_t>(t.blocks.size()) / t.dim(0);
      TANDEM_RETURN_IF_ERROR(Dequantize(
          t.type, absl::MakeConstSpan(t.blocks.data() + (row_begin + r) * row_bytes, row_bytes),
          absl::MakeSpan(row)));
      src = row.data();
    }
    std::memcpy(out.data() + r * cols, src + col_begin, cols * sizeof(float));
  }
  return out;
}

// Whether columns [col_begin, col_begin+cols) of quantised t start or end inside a block.
bool CutsBlocks(const Tensor& t, int64_t col_begin, int64_t cols) {
  const int64_t block = GgmlTypeTraits(t.type).block_size;
  return col_begin % block != 0 || cols % block != 0;
}

// The same slice of a quantised matrix as its blocks. REQUIRES: !CutsBlocks. Padding rows are
// zero bytes, which every supported type decodes as 0.
std::vector<uint8_t> SubBlocks(const Tensor& t, int64_t row_begin, int64_t rows, int64_t col_begin,
                               int64_t cols, int64_t padded_rows) {
  const GgmlTypeInfo& info = GgmlTypeTraits(t.type);
  const int64_t row_bytes = static_cast<int64_t>(t.blocks.size()) / t.dim(0);
  const int64_t offset = col_begin / info.block_size * info.block_bytes;
  const int64_t bytes = cols / info.block_size * info.block_bytes;
  std::vector<uint8_t> out(padded_rows * bytes, 0);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(out.data() + r * bytes, t.blocks.data() + (row_begin + r) * row_bytes + offset,
                bytes);
  }
  return out;
}

// One line per distinct fallback: "blk.<l>.<tensor>: <why>" for every layer l becomes
// "<tensor>: <why> (<count> layers)", so a tp=9 load reports w_down once per rank instead of once
// per layer.
std::vector<std::string> SummarizeFallbacks(const std::vector<std::string>& lines) {
  std::vector<std::string> order;
  std::map<std::string, int> layers;
  for (const std::string& line : lines) {
    std::string key = line;
    if (absl::StartsWith(line, "blk.")) {
      const size_t dot = line.find('.', 4);
      if (dot != std::string::npos) key = line.substr(dot + 1);
    }
    if (layers[key]++ == 0) order.push_back(key);
  }
  std::vector<std::string> out;
  for (const std::string& key : order) {
    const int n = layers[key];
    out.push_back(n == 1 ? key : absl::StrCat(key, " (", n, " layers)"));
  }
  return out;
}

class Preparer {
 public:
  Preparer(ComputeBackend& backend, WeightCache& cache, RankWeights* out)
      : backend_(backend), cache_(cache), prefix_(backend.device_key() + "/"), out_(out) {}

  // Whether the backend keeps `type` as blocks (probed once per type with a one-block matrix).
  bool KeepsBlocks(GgmlType type) {
    auto it = keeps_.find(type);
    if (it != keeps_.end()) return it->second;
    const GgmlTypeInfo& info = GgmlTypeTraits(type);
    const std::vector<uint8_t> zero(info.block_bytes, 0);
    const bool keeps =
        backend_.PrepareQuantizedLinear(type, zero.data(), 1, info.block_size, nullptr).ok();
    keeps_.emplace(type, keeps);
    return keeps;
  }

  // The embedding table: a matrix whose rows the backend reads (shared with the LM head's when
  // tied and unsliced), else an f32 buffer.
  absl::Status Embedding(const LlamaWeights& w, const std::string& lm_head_name) {
    const LlamaConfig& c = w.config;
    if (w.token_embedding.quantized() && KeepsBlocks(w.token_embedding.type)) {
      TANDEM_ASSIGN_OR_RETURN(
          std::shared_ptr<const LinearOp> table,
          Linear(c.tied_embeddings ? lm_head_name : "token_embd", w.token_embedding, nullptr, 0,
                 c.vocab_size, 0, c.hidden_size, c.vocab_size));
      if (backend_.CanReadLinearRows(*table)) {
        out_->embedding_rows = std::move(table);
        return absl::OkStatus();
      }
    }
    TANDEM_ASSIGN_OR_RETURN(out_->embedding, Buffer("token_embd", w.token_embedding));
    return absl::OkStatus();
  }

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
          std::vector<float> b;
          if (bias != nullptr && !bias->empty()) {
            b.assign(pad_rows, 0.f);
            std::copy(bias->data.begin() + rb, bias->data.begin() + rb + rows, b.begin());
          }
          const float* bias_ptr = b.empty() ? nullptr : b.data();
          if (w.quantized() && !CutsBlocks(w, cb, cols)) {
            const std::vector<uint8_t> blocks = SubBlocks(w, rb, rows, cb, cols, pad_rows);
            absl::StatusOr<std::unique_ptr<LinearOp>> op =
                backend_.PrepareQuantizedLinear(w.type, blocks.data(), pad_rows, cols, bias_ptr);
            if (op.ok()) {
              return std::shared_ptr<const void>(
                  std::shared_ptr<const LinearOp>(std::move(op).value()));
            }
            if (op.status().code() != absl::StatusCode::kUnimplemented) return op.status();
          }
          TANDEM_ASSIGN_OR_RETURN(const std::vector<float> sub,
                                  SubMatrix(w, rb, rows, cb, cols, pad_rows));
          TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<LinearOp> op,
                                  backend_.PrepareLinear(sub.data(), pad_rows, cols, bias_ptr));
          return std::shared_ptr<const void>(std::shared_ptr<const LinearOp>(std::move(op)));
        }));
    auto op = std::static_pointer_cast<const LinearOp>(v);
    Count(op.get(), op->resident_bytes());
    if (w.quantized() && CutsBlocks(w, cb, cols) && KeepsBlocks(w.type)) {
      out_->f32_fallbacks.push_back(
          absl::StrCat(name, ": columns [", cb, ", ", cb + cols, ") cut ", GgmlTypeName(w.type),
                       "'s ", GgmlTypeTraits(w.type).block_size, "-element blocks, kept as f32"));
    }
    return op;
  }

  absl::StatusOr<std::shared_ptr<const DeviceBuffer>> Buffer(const std::string& name,
                                                             const Tensor& t) {
    TANDEM_ASSIGN_OR_RETURN(
        std::shared_ptr<const void> v,
        cache_.GetOrPrepare(prefix_ + name, [&]() -> absl::StatusOr<std::shared_ptr<const void>> {
          const int64_t bytes = t.numel() * static_cast<int64_t>(sizeof(float));
          TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceBuffer> buf, backend_.Allocate(bytes));
          if (t.quantized()) {  // a backend that keeps no blocks: dequantised at upload
            std::vector<float> f32(static_cast<size_t>(t.numel()));
            TANDEM_RETURN_IF_ERROR(
                Dequantize(t.type, absl::MakeConstSpan(t.blocks), absl::MakeSpan(f32)));
            TANDEM_RETURN_IF_ERROR(backend_.Upload(buf->data(), f32.data(), bytes));
          } else {
            TANDEM_RETURN_IF_ERROR(backend_.Upload(buf->data(), t.data.data(), bytes));
          }
          return std::shared_ptr<const void>(std::shared_ptr<const DeviceBuffer>(std::move(buf)));
        }));
    auto buf = std::static_pointer_cast<const DeviceBuffer>(v);
    Count(buf.get(), buf->bytes());
    return buf;
  }

 private:
  // Adds a prepared tensor's bytes to the rank's total, once however often the rank uses it.
  void Count(const void* p, int64_t bytes) {
    if (counted_.insert(p).second) out_->resident_bytes += bytes;
  }

  ComputeBackend& backend_;
  WeightCache& cache_;
  const std::string prefix_;
  RankWeights* out_;
  std::map<GgmlType, bool> keeps_;
  std::set<const void*> counted_;
};

}  // namespace

absl::StatusOr<RankWeights> PrepareRankWeights(const LlamaWeights& weights,
                                               const ParallelConfig& parallel,
                                               const RankPlacement& p, ComputeBackend& backend,
                                               WeightCache& cache) {
  const LlamaConfig& c = weights.config;
  const int64_t d = c.head_dim;
  const int32_t tp = parallel.tp;
  RankWeights out;
  Preparer prep(backend, cache, &out);
  TANDEM_RETURN_IF_ERROR(prep.Embedding(weights, "lm_head"));
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
    if (c.has_qk_norm) {
      TANDEM_ASSIGN_OR_RETURN(rl.q_norm, prep.Buffer(n + "q_norm", lw.q_norm));
      TANDEM_ASSIGN_OR_RETURN(rl.k_norm, prep.Buffer(n + "k_norm", lw.k_norm));
    }
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
  out.f32_fallbacks = SummarizeFallbacks(out.f32_fallbacks);
  return out;
}

}  // namespace tandem
