// A ComputeBackend that forwards every op to another one: engine tests derive from it and
// override the few calls they observe or change (padded steps, the fused add + RMSNorm).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "model/backend.h"

namespace tandem::testing {

class ForwardingBackend : public ComputeBackend {
 public:
  explicit ForwardingBackend(std::unique_ptr<ComputeBackend> inner) : in_(std::move(inner)) {}

  std::string_view name() const override { return in_->name(); }
  std::string device_key() const override { return in_->device_key(); }
  absl::StatusOr<std::unique_ptr<DeviceBuffer>> Allocate(int64_t bytes) override {
    return in_->Allocate(bytes);
  }
  absl::Status Upload(void* d, const void* s, int64_t b) override { return in_->Upload(d, s, b); }
  absl::Status Download(void* d, const void* s, int64_t b) override {
    return in_->Download(d, s, b);
  }
  absl::Status Copy(void* d, const void* s, int64_t b) override { return in_->Copy(d, s, b); }
  absl::Status Synchronize() override { return in_->Synchronize(); }
  absl::Status Flush() override { return in_->Flush(); }
  ActivationDType activation_dtype() const override { return in_->activation_dtype(); }
  std::string SingleRankReason() const override { return in_->SingleRankReason(); }
  int64_t PaddedRows(int64_t rows) const override { return in_->PaddedRows(rows); }
  void BeginForward(int64_t rows) override { in_->BeginForward(rows); }
  absl::StatusOr<std::unique_ptr<LinearOp>> PrepareLinear(const float* w, int64_t n, int64_t k,
                                                          const float* bias) override {
    return in_->PrepareLinear(w, n, k, bias);
  }
  absl::StatusOr<std::unique_ptr<LinearOp>> PrepareQuantizedLinear(GgmlType type, const uint8_t* w,
                                                                   int64_t n, int64_t k,
                                                                   const float* bias) override {
    return in_->PrepareQuantizedLinear(type, w, n, k, bias);
  }
  bool CanReadLinearRows(const LinearOp& op) const override { return in_->CanReadLinearRows(op); }
  absl::Status LinearRows(const LinearOp& op, const int32_t* ids, int64_t m, float* out) override {
    return in_->LinearRows(op, ids, m, out);
  }
  absl::Status Linear(const LinearOp& op, const float* x, int64_t m, float* y) override {
    return in_->Linear(op, x, m, y);
  }
  absl::Status LinearF32Out(const LinearOp& op, const float* x, int64_t m, float* y) override {
    return in_->LinearF32Out(op, x, m, y);
  }
  absl::Status LinearAdd(const LinearOp& op, const float* x, int64_t m, float* y,
                         float* scratch) override {
    return in_->LinearAdd(op, x, m, y, scratch);
  }
  absl::Status LinearSiluMul(const LinearOp& gate, const float* x, int64_t m, const float* up,
                             float* out) override {
    return in_->LinearSiluMul(gate, x, m, up, out);
  }
  absl::Status LinearMany(absl::Span<const LinearOp* const> ops, const float* x, int64_t m,
                          absl::Span<float* const> ys) override {
    return in_->LinearMany(ops, x, m, ys);
  }
  absl::Status LinearGatedUp(const LinearOp& gate, const LinearOp& up_op, const float* x, int64_t m,
                             float* up, float* out) override {
    return in_->LinearGatedUp(gate, up_op, x, m, up, out);
  }
  absl::Status Embedding(const float* table, const int32_t* ids, int64_t m, int64_t hidden,
                         float* out) override {
    return in_->Embedding(table, ids, m, hidden, out);
  }
  absl::Status RmsNorm(const float* x, const float* w, int64_t m, int64_t n, float eps,
                       float* y) override {
    return in_->RmsNorm(x, w, m, n, eps, y);
  }
  absl::Status Rope(float* x, int64_t m, int32_t heads, int32_t head_dim, const int64_t* positions,
                    const RopeParams& params) override {
    return in_->Rope(x, m, heads, head_dim, positions, params);
  }
  absl::Status SiluMul(const float* g, const float* u, int64_t n, float* out) override {
    return in_->SiluMul(g, u, n, out);
  }
  absl::Status Add(float* x, const float* y, int64_t n) override { return in_->Add(x, y, n); }
  absl::Status AddRmsNorm(float* residual, const float* x, const float* w, int64_t m, int64_t n,
                          float eps, float* out) override {
    return in_->AddRmsNorm(residual, x, w, m, n, eps, out);
  }
  bool PrefersAddRmsNorm() const override { return in_->PrefersAddRmsNorm(); }
  absl::Status GatherRows(const float* src, const int64_t* index, int64_t m, int64_t cols,
                          float* dst) override {
    return in_->GatherRows(src, index, m, cols, dst);
  }
  absl::Status WriteKv(const KvPoolView& pool, int32_t layer, const int64_t* slots, int64_t m,
                       const float* k, const float* v) override {
    return in_->WriteKv(pool, layer, slots, m, k, v);
  }
  absl::Status Attention(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                         const float* q, int32_t num_q_heads, float scale, float* out,
                         float* lse) override {
    return in_->Attention(pool, layer, rows, q, num_q_heads, scale, out, lse);
  }
  absl::Status CorrectPartial(int32_t n, int32_t me, const float* all_lse, int64_t items,
                              int32_t head_dim, float* out) override {
    return in_->CorrectPartial(n, me, all_lse, items, head_dim, out);
  }

 private:
  std::unique_ptr<ComputeBackend> in_;
};

}  // namespace tandem::testing
