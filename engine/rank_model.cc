#include "engine/rank_model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/collective_dtype.h"

namespace tandem {
namespace {

enum Slot : int {
  kX,
  kH,
  kQ,
  kK,
  kV,
  kKAll,
  kVAll,
  kQAll,
  kOAll,
  kLse,
  kLseAll,
  kAttn,
  kO,
  kGate,
  kUp,
  kXAll,
  kHs,
  kLogits,
  kLogitsAll,
  kNumSlots
};

// Every collective is preceded by this: the backend launches what it has recorded (CUDA graph
// pieces; a collective reads what they write, ComputeBackend::Flush), and the element type is
// the one collective_dtype.h gives for the backend's activations.
absl::StatusOr<CommDType> ReadyFor(ComputeBackend& backend, Collective c) {
  TANDEM_RETURN_IF_ERROR(backend.Flush());
  return CollectiveDType(c, backend.activation_dtype());
}

}  // namespace

RankModel::RankModel(const LlamaConfig& config, const ParallelConfig& parallel,
                     const RankPlacement& placement, std::unique_ptr<ComputeBackend> backend,
                     RankWeights weights, RankComms comms, KvPoolView pool)
    : config_(config),
      parallel_(parallel),
      placement_(placement),
      backend_(std::move(backend)),
      weights_(std::move(weights)),
      comms_(std::move(comms)),
      pool_(pool),
      buffers_(kNumSlots) {}

void RankModel::AbortComms(const absl::Status& reason) {
  for (Communicator* c : {comms_.tp.get(), comms_.pcp.get(), comms_.dcp.get()}) {
    if (c != nullptr) c->Abort(reason);
  }
}

float* RankModel::Buf(int slot, int64_t floats) {
  const int64_t bytes = std::max<int64_t>(floats, 1) * static_cast<int64_t>(sizeof(float));
  std::unique_ptr<DeviceBuffer>& b = buffers_[slot];
  if (b == nullptr || b->bytes() < bytes) {
    absl::StatusOr<std::unique_ptr<DeviceBuffer>> nb = backend_->Allocate(bytes + bytes / 2);
    if (!nb.ok()) {
      buffer_status_ = nb.status();
      return nullptr;
    }
    b = std::move(nb).value();
  }
  return b->f32();
}

absl::Status RankModel::AttentionLayer(const StepPlan& plan, int32_t layer, int64_t rows,
                                       int64_t max_rows, float* q, float* attn_out) {
  const int32_t dcp = parallel_.dcp;
  const int32_t nq = placement_.q_head_count;
  const int32_t d = config_.head_dim;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  AttentionRows arows;
  arows.request = group_request_.data();
  arows.position = group_position_.data();
  arows.tables = plan.tables();
  arows.dcp = parallel_.dcp_geometry();
  arows.dcp_rank = placement_.dcp_rank;
  if (dcp == 1) {
    arows.num_rows = rows;
    float* lse = Buf(kLse, rows * nq);
    if (lse == nullptr) return buffer_status_;
    return backend_->Attention(pool_, layer, arows, q, nq, scale, attn_out, lse);
  }
  // DCP: every member attends all rows and heads of the group against its own tokens.
  const int64_t items = dcp * max_rows * nq;
  float* qall = Buf(kQAll, items * d);
  float* oall = Buf(kOAll, items * d);
  float* lse = Buf(kLse, items);
  float* lse_all = Buf(kLseAll, dcp * items);
  if (qall == nullptr || oall == nullptr || lse == nullptr || lse_all == nullptr) {
    return buffer_status_;
  }
  TANDEM_ASSIGN_OR_RETURN(CommDType t, ReadyFor(*backend_, Collective::kDcpQueryAllGather));
  TANDEM_RETURN_IF_ERROR(comms_.dcp->AllGather(q, qall, max_rows * nq * d, t));
  arows.num_rows = dcp * max_rows;
  TANDEM_RETURN_IF_ERROR(backend_->Attention(pool_, layer, arows, qall, nq, scale, oall, lse));
  TANDEM_ASSIGN_OR_RETURN(t, ReadyFor(*backend_, Collective::kDcpLseAllGather));
  TANDEM_RETURN_IF_ERROR(comms_.dcp->AllGather(lse, lse_all, items, t));
  TANDEM_RETURN_IF_ERROR(
      backend_->CorrectPartial(dcp, placement_.dcp_rank, lse_all, items, d, oall));
  TANDEM_ASSIGN_OR_RETURN(t, ReadyFor(*backend_, Collective::kDcpOutputReduceScatter));
  return comms_.dcp->ReduceScatter(oall, attn_out, max_rows * nq * d, t);
}

// With tp > 1 every rank holds a partial product. Rank 0 adds its partial to x inside the GEMM
// and the others write theirs over their copy of x (identical on all ranks, and not read again
// before the all-reduce), so the all-reduce leaves x + Σ partials on every rank with no
// separate add.
absl::Status RankModel::ResidualLinear(const LinearOp& op, const float* in, int64_t rows, float* x,
                                       float* scratch) {
  ComputeBackend& be = *backend_;
  if (parallel_.tp == 1) return be.LinearAdd(op, in, rows, x, scratch);
  if (comms_.tp->rank() == 0) {
    TANDEM_RETURN_IF_ERROR(be.LinearAdd(op, in, rows, x, scratch));
  } else {
    TANDEM_RETURN_IF_ERROR(be.Linear(op, in, rows, x));
  }
  TANDEM_ASSIGN_OR_RETURN(const CommDType t, ReadyFor(be, Collective::kTpResidualAllReduce));
  return comms_.tp->AllReduce(x, rows * op.n(), t);
}

absl::StatusOr<const float*> RankModel::ResidualLinearNorm(const LinearOp& op, const float* in,
                                                           int64_t rows, float* x, float* scratch,
                                                           const DeviceBuffer& norm_w, float* h) {
  ComputeBackend& be = *backend_;
  const float eps = config_.rms_norm_eps;
  if (parallel_.tp == 1 && be.PrefersAddRmsNorm()) {
    TANDEM_RETURN_IF_ERROR(be.Linear(op, in, rows, scratch));
    TANDEM_RETURN_IF_ERROR(be.AddRmsNorm(x, scratch, norm_w.f32(), rows, op.n(), eps, scratch));
    return scratch;
  }
  TANDEM_RETURN_IF_ERROR(ResidualLinear(op, in, rows, x, scratch));
  TANDEM_RETURN_IF_ERROR(be.RmsNorm(x, norm_w.f32(), rows, op.n(), eps, h));
  return h;
}

absl::Status RankModel::Forward(const StepPlan& plan, std::vector<float>* logits) {
  const int32_t c = placement_.pcp_rank;
  const int32_t tp = parallel_.tp, pcp = parallel_.pcp, dcp = parallel_.dcp;
  const std::vector<int64_t>& mine = plan.pcp.gather[c];
  const int64_t m_real = static_cast<int64_t>(mine.size());
  // Without PCP and DCP every rank runs all the step's rows, so the backend may run them on more
  // rows (padding that reads and writes nothing, ComputeBackend::PaddedRows) and captured work is
  // reused across batch sizes; TP ranks' backends pad alike (same options), so their collectives
  // keep equal counts.
  const bool pad = pcp * dcp == 1;
  const int64_t m = pad ? std::max(m_real, backend_->PaddedRows(m_real)) : m_real;
  const int64_t mmax = std::max(m, plan.pcp.max_rows_per_rank());
  const int64_t hidden = config_.hidden_size;
  const int32_t d = config_.head_dim;
  const int32_t nq = placement_.q_head_count, nk = placement_.kv_head_count;
  const int64_t inter = weights_.intermediate_count;
  const DcpGeometry geom = parallel_.dcp_geometry();
  const BlockTablesView tables = plan.tables();
  if (tp * pcp * dcp != 1) {
    if (const std::string why = backend_->SingleRankReason(); !why.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "this ", absl::string_view(backend_->name().data(), backend_->name().size()),
          " backend runs instances of one rank only (got ", parallel_.ToString(), "): ", why));
    }
  }

  // ---- host metadata ----
  ids_.assign(m, 0);
  positions_.assign(m, -1);  // padding rows: position −1 (no keys), KV slot −1 (not written)
  for (int64_t i = 0; i < m_real; ++i) {
    ids_[i] = plan.token[mine[i]];
    positions_[i] = plan.position[mine[i]];
  }
  // K/V rows this rank writes: its own (pcp = 1) or every PCP peer's, padded to mmax each.
  const int64_t kv_rows = pcp == 1 ? m : pcp * mmax;
  kv_slots_.assign(kv_rows, -1);
  for (int32_t cc = 0; cc < pcp; ++cc) {
    if (pcp == 1 && cc != c) continue;
    const std::vector<int64_t>& rows = plan.pcp.gather[cc];
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t row = rows[i];
      kv_slots_[(pcp == 1 ? 0 : cc * mmax) + i] =
          SlotOf(geom, placement_.dcp_rank, plan.position[row], tables.table(plan.request[row]));
    }
  }
  // Attention rows: the rank's own (dcp = 1) or every DCP member's rows, padded to mmax each.
  if (dcp == 1) {
    group_request_.assign(m, 0);
    group_position_.assign(positions_.begin(), positions_.end());
    for (int64_t i = 0; i < m_real; ++i) group_request_[i] = plan.request[mine[i]];
  } else {
    group_request_.assign(dcp * mmax, 0);
    group_position_.assign(dcp * mmax, -1);
    const std::vector<int32_t> members = DcpGroupRanks(parallel_, placement_.dcp_group);
    for (int32_t j = 0; j < dcp; ++j) {
      const std::vector<int64_t>& rows = plan.pcp.gather[members[j] / tp];
      for (size_t i = 0; i < rows.size(); ++i) {
        group_request_[j * mmax + i] = plan.request[rows[i]];
        group_position_[j * mmax + i] = plan.position[rows[i]];
      }
    }
  }

  // ---- buffers ----
  float* x = Buf(kX, mmax * hidden);
  float* h = Buf(kH, mmax * hidden);
  float* q = Buf(kQ, mmax * nq * d);
  float* k = Buf(kK, mmax * nk * d);
  float* v = Buf(kV, mmax * nk * d);
  float* attn = Buf(kAttn, mmax * nq * d);
  float* o = Buf(kO, mmax * hidden);
  float* gate = Buf(kGate, mmax * inter);
  float* up = Buf(kUp, mmax * inter);
  float* kall = pcp > 1 ? Buf(kKAll, pcp * mmax * nk * d) : k;
  float* vall = pcp > 1 ? Buf(kVAll, pcp * mmax * nk * d) : v;
  for (float* p : {x, h, q, k, v, attn, o, gate, up, kall, vall}) {
    if (p == nullptr) return buffer_status_;
  }

  const RopeParams rope{
      config_.rope_theta, config_.rope_style,
      config_.rope_freq_factors.empty() ? nullptr : config_.rope_freq_factors.data(),
      config_.rope_mscale};
  ComputeBackend& be = *backend_;
  be.BeginForward(m);
  if (weights_.embedding_rows != nullptr) {
    TANDEM_RETURN_IF_ERROR(be.LinearRows(*weights_.embedding_rows, ids_.data(), m, x));
  } else {
    TANDEM_RETURN_IF_ERROR(be.Embedding(weights_.embedding->f32(), ids_.data(), m, hidden, x));
  }
  // The attention input attn_norm(x) when the previous layer's down projection computed it.
  const float* normed = nullptr;
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    const RankLayerWeights& w = weights_.layers[l];
    if (normed == nullptr) {
      TANDEM_RETURN_IF_ERROR(be.RmsNorm(x, w.attn_norm->f32(), m, hidden, config_.rms_norm_eps, h));
      normed = h;
    }
    const LinearOp* qkv_ops[] = {w.wq.get(), w.wk.get(), w.wv.get()};
    float* const qkv_out[] = {q, k, v};
    TANDEM_RETURN_IF_ERROR(be.LinearMany(qkv_ops, normed, m, qkv_out));
    if (w.q_norm != nullptr) {  // per-head RMSNorm: rows of head_dim, whole heads on every rank
      TANDEM_RETURN_IF_ERROR(be.RmsNorm(q, w.q_norm->f32(), m * nq, d, config_.rms_norm_eps, q));
      TANDEM_RETURN_IF_ERROR(be.RmsNorm(k, w.k_norm->f32(), m * nk, d, config_.rms_norm_eps, k));
    }
    TANDEM_RETURN_IF_ERROR(be.Rope(q, m, nq, d, positions_.data(), rope));
    TANDEM_RETURN_IF_ERROR(be.Rope(k, m, nk, d, positions_.data(), rope));
    if (pcp > 1) {
      TANDEM_ASSIGN_OR_RETURN(const CommDType t, ReadyFor(be, Collective::kPcpKvAllGather));
      TANDEM_RETURN_IF_ERROR(comms_.pcp->AllGather(k, kall, mmax * nk * d, t));
      TANDEM_RETURN_IF_ERROR(comms_.pcp->AllGather(v, vall, mmax * nk * d, t));
    }
    TANDEM_RETURN_IF_ERROR(be.WriteKv(pool_, l, kv_slots_.data(), kv_rows, kall, vall));
    TANDEM_RETURN_IF_ERROR(AttentionLayer(plan, l, m, mmax, q, attn));
    TANDEM_ASSIGN_OR_RETURN(normed, ResidualLinearNorm(*w.wo, attn, m, x, o, *w.ffn_norm, h));
    TANDEM_RETURN_IF_ERROR(be.LinearGatedUp(*w.w_gate, *w.w_up, normed, m, up, gate));
    if (l + 1 == config_.num_layers) {
      TANDEM_RETURN_IF_ERROR(ResidualLinear(*w.w_down, gate, m, x, o));
      normed = nullptr;
    } else {
      // The next layer's attention norm follows this residual add.
      TANDEM_ASSIGN_OR_RETURN(normed, ResidualLinearNorm(*w.w_down, gate, m, x, o,
                                                         *weights_.layers[l + 1].attn_norm, h));
    }
  }

  // ---- logits ----
  const int64_t s = static_cast<int64_t>(plan.logit_rows.size());
  if (s == 0) return be.Synchronize();
  const int64_t s_run = pad ? std::max(s, backend_->PaddedRows(s)) : s;
  const float* src = x;
  logit_index_.resize(s);
  if (pcp > 1) {
    float* xall = Buf(kXAll, pcp * mmax * hidden);
    if (xall == nullptr) return buffer_status_;
    TANDEM_ASSIGN_OR_RETURN(const CommDType t, ReadyFor(be, Collective::kPcpHiddenAllGather));
    TANDEM_RETURN_IF_ERROR(comms_.pcp->AllGather(x, xall, mmax * hidden, t));
    const std::vector<int64_t> restore = plan.pcp.RestoreIndex(mmax);
    for (int64_t i = 0; i < s; ++i) logit_index_[i] = restore[plan.logit_rows[i]];
    src = xall;
  } else {
    for (int64_t i = 0; i < s; ++i) logit_index_[i] = plan.logit_rows[i];
  }
  logit_index_.resize(s_run, -1);       // padding rows gather zeros; their logits are not read
  if (c != 0) return be.Synchronize();  // the TP group of PCP rank 0 computes the logits
  const int64_t vmax = weights_.vocab_slice_max;
  float* hs = Buf(kHs, s_run * hidden);
  float* lg = Buf(kLogits, s_run * vmax);
  float* lg_all = tp > 1 ? Buf(kLogitsAll, tp * s * vmax) : lg;
  if (hs == nullptr || lg == nullptr || lg_all == nullptr) return buffer_status_;
  TANDEM_RETURN_IF_ERROR(be.GatherRows(src, logit_index_.data(), s_run, hidden, hs));
  TANDEM_RETURN_IF_ERROR(
      be.RmsNorm(hs, weights_.output_norm->f32(), s_run, hidden, config_.rms_norm_eps, hs));
  TANDEM_RETURN_IF_ERROR(be.LinearF32Out(*weights_.lm_head, hs, s_run, lg));
  if (tp > 1) {
    TANDEM_ASSIGN_OR_RETURN(const CommDType t, ReadyFor(be, Collective::kTpLogitsAllGather));
    TANDEM_RETURN_IF_ERROR(comms_.tp->AllGather(lg, lg_all, s * vmax, t));
  }
  if (placement_.global_rank == 0) {
    std::vector<float> host(tp * s * vmax);
    TANDEM_RETURN_IF_ERROR(be.Download(host.data(), lg_all, host.size() * sizeof(float)));
    const int64_t vocab = config_.vocab_size;
    logits->assign(s * vocab, 0.f);
    for (int32_t t = 0; t < tp; ++t) {
      const int64_t vb = SliceBegin(vocab, t, tp), vc = SliceCount(vocab, t, tp);
      for (int64_t i = 0; i < s; ++i) {
        std::copy_n(host.data() + (t * s + i) * vmax, vc, logits->data() + i * vocab + vb);
      }
    }
  }
  return be.Synchronize();
}

}  // namespace tandem
