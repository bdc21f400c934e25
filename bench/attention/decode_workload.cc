#include "bench/attention/decode_workload.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::bench {

absl::StatusOr<std::unique_ptr<DecodeWorkload>> DecodeWorkload::Create(const DecodeShape& s) {
  if (s.seqs < 1 || s.tokens < 1 || s.kv_heads < 1 || s.head_dim < 1 || s.gqa < 1 ||
      s.block_size < 1 || s.layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("every benchmark dimension must be >= 1 (seqs=", s.seqs, " tokens=", s.tokens,
                     " kv_heads=", s.kv_heads, " head_dim=", s.head_dim, " gqa=", s.gqa,
                     " block_size=", s.block_size, " layers=", s.layers, ")"));
  }
  std::unique_ptr<DecodeWorkload> w(new DecodeWorkload(s));
  if (!w->pool_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate the ", w->pool_bytes_.size(), "-byte KV pool"));
  }
  TANDEM_RETURN_IF_ERROR(ValidateAttentionCall(w->pool_, 0, w->Rows(), s.kv_heads * s.gqa));
  return w;
}

DecodeWorkload::DecodeWorkload(const DecodeShape& s) : shape_(s) {
  PoolGeometry g;
  g.num_kv_heads = s.kv_heads;
  g.num_layers = s.layers;
  g.block_size = s.block_size;
  g.head_dim = s.head_dim;
  g.dtype = s.dtype;
  const int64_t blocks_per_seq = (s.tokens + s.block_size - 1) / s.block_size;
  const int64_t num_blocks = blocks_per_seq * s.seqs;
  pool_bytes_ = BenchBuffer(tandem::PoolBytes(g, num_blocks), s.huge_pages);
  pool_ = KvPoolView{pool_bytes_.data(), num_blocks, g};

  std::mt19937_64 rng(7);
  table_ids_.resize(num_blocks);
  std::iota(table_ids_.begin(), table_ids_.end(), 0);
  std::shuffle(table_ids_.begin(), table_ids_.end(), rng);
  for (int32_t r = 0; r <= s.seqs; ++r) table_offsets_.push_back(r * blocks_per_seq);

  // One sequence's worth of random K/V rows, written to every sequence and layer: the values
  // do not matter for speed, only that they are finite.
  std::normal_distribution<float> normal;
  std::vector<float> kv(s.tokens * s.kv_heads * s.head_dim);
  for (float& x : kv) x = normal(rng);
  std::vector<int64_t> slots(s.tokens);
  for (int32_t r = 0; r < s.seqs; ++r) {
    for (int64_t t = 0; t < s.tokens; ++t) {
      slots[t] = int64_t{table_ids_[r * blocks_per_seq + t / s.block_size]} * s.block_size +
                 t % s.block_size;
    }
    for (int32_t layer = 0; layer < s.layers; ++layer) {
      WriteKvCache(pool_, layer, slots.data(), s.tokens, kv.data(), kv.data());
    }
  }

  for (int32_t r = 0; r < s.seqs; ++r) {
    request_.push_back(r);
    position_.push_back(s.tokens - 1);
  }
  const int64_t q_floats = int64_t{s.seqs} * s.kv_heads * s.gqa * s.head_dim;
  q_.resize(q_floats);
  for (float& x : q_) x = normal(rng);
  out_.resize(q_floats);
  lse_.resize(int64_t{s.seqs} * s.kv_heads * s.gqa);
}

int64_t DecodeWorkload::KvBytesPerLayer() const {
  return int64_t{shape_.seqs} * shape_.tokens * shape_.kv_heads * shape_.head_dim * 2 *
         KvDTypeBytes(shape_.dtype);
}

AttentionRows DecodeWorkload::Rows() const {
  return AttentionRows{shape_.seqs,
                       request_.data(),
                       position_.data(),
                       BlockTablesView{table_ids_.data(), table_offsets_.data(), shape_.seqs},
                       DcpGeometry{shape_.block_size, 1, 1},
                       0};
}

double DecodeWorkload::TimedAttention(int32_t layer, BenchClock clock) {
  const AttentionRows rows = Rows();
  const float scale = 1.f / std::sqrt(static_cast<float>(shape_.head_dim));
  const double start = ClockSeconds(clock);
  PagedAttention(pool_, layer, rows, q_.data(), shape_.kv_heads * shape_.gqa, scale, out_.data(),
                 lse_.data());
  return ClockSeconds(clock) - start;
}

double DecodeWorkload::Checksum() const {
  double s = 0;
  for (float x : out_) s += x;
  return s;
}

}  // namespace tandem::bench
