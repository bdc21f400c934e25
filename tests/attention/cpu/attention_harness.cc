#include "tests/attention/cpu/attention_harness.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "attention/cpu/paged_attention.h"
#include "attention/lse_merge.h"
#include "common/status_macros.h"

namespace tandem::testing {
namespace {

double RoundTo(KvDType t, float x) {
  switch (t) {
    case KvDType::kF32:
      return x;
    case KvDType::kF16:
      return HalfToFloat(FloatToHalf(x));
    case KvDType::kBF16:
      return Bf16ToFloat(FloatToBf16(x));
  }
  return x;
}

PoolGeometry Geometry(const AttentionCase& c) {
  PoolGeometry g;
  g.num_kv_heads = c.num_kv_heads;
  g.num_layers = 2;
  g.block_size = c.dcp.block_size;
  g.head_dim = c.head_dim;
  g.dtype = c.dtype;
  return g;
}

constexpr int32_t kLayer = 1;

}  // namespace

std::string AttentionCase::Describe() const {
  std::string s =
      absl::StrCat("B=", dcp.block_size, " N=", dcp.dcp, " I=", dcp.interleave,
                   " kv_heads=", num_kv_heads, " group=", group_size, " head_dim=", head_dim,
                   " dtype=", KvDTypeName(dtype).data(), " seed=", seed, " kv_len=[");
  for (size_t r = 0; r < kv_len.size(); ++r) absl::StrAppend(&s, r ? "," : "", kv_len[r]);
  absl::StrAppend(&s, "] rows=", num_rows());
  return s;
}

AttentionCase MakeCase(DcpGeometry dcp, int32_t num_kv_heads, int32_t group_size, int32_t head_dim,
                       KvDType dtype, uint64_t seed) {
  AttentionCase c;
  c.dcp = dcp;
  c.num_kv_heads = num_kv_heads;
  c.group_size = group_size;
  c.head_dim = head_dim;
  c.dtype = dtype;
  c.seed = seed;
  return c;
}

void AddDecodeRequest(AttentionCase& c, int64_t context) {
  c.row_request.push_back(static_cast<int32_t>(c.kv_len.size()));
  c.row_position.push_back(context);
  c.kv_len.push_back(context + 1);
}

void AddPaddingRow(AttentionCase& c) {
  c.row_request.push_back(987654321);
  c.row_position.push_back(-1);
}

void AddPrefillRequest(AttentionCase& c, int64_t length, int64_t rows) {
  const int32_t r = static_cast<int32_t>(c.kv_len.size());
  for (int64_t p = length - rows; p < length; ++p) {
    c.row_request.push_back(r);
    c.row_position.push_back(p);
  }
  c.kv_len.push_back(length);
}

AttentionData MakeData(const AttentionCase& c) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  AttentionData d;
  const int64_t row_floats = int64_t{c.num_kv_heads} * c.head_dim;
  for (int64_t len : c.kv_len) {
    std::vector<float> k(len * row_floats), v(len * row_floats);
    for (float& x : k) x = normal(rng);
    for (float& x : v) x = normal(rng);
    std::vector<double> kr(k.size()), vr(v.size());
    for (size_t i = 0; i < k.size(); ++i) kr[i] = RoundTo(c.dtype, k[i]);
    for (size_t i = 0; i < v.size(); ++i) vr[i] = RoundTo(c.dtype, v[i]);
    d.k.push_back(std::move(k));
    d.v.push_back(std::move(v));
    d.k_ref.push_back(std::move(kr));
    d.v_ref.push_back(std::move(vr));
  }
  // Queries twice the keys' spread make the softmax peaked enough that a wrong key shows.
  d.q.resize(c.num_rows() * c.num_q_heads() * c.head_dim);
  for (float& x : d.q) x = 2.f * normal(rng);
  d.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));

  d.table_offsets.push_back(0);
  for (int64_t len : c.kv_len) {
    d.table_offsets.push_back(d.table_offsets.back() + VirtualBlocksFor(c.dcp, len));
  }
  const int64_t used = d.table_offsets.back();
  d.num_blocks = used + 3;
  std::vector<int32_t> ids(d.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  d.table_ids.assign(ids.begin(), ids.begin() + used);
  return d;
}

absl::StatusOr<ShardedOutput> RunSharded(const AttentionCase& c, const AttentionData& d) {
  const PoolGeometry g = Geometry(c);
  const int32_t hq = c.num_q_heads();
  BlockTablesView tables{d.table_ids.data(), d.table_offsets.data(),
                         static_cast<int32_t>(c.kv_len.size())};
  ShardedOutput result;
  for (int32_t rank = 0; rank < c.dcp.dcp; ++rank) {
    std::vector<uint8_t> bytes(PoolBytes(g, d.num_blocks), 0xff);  // all NaN in every dtype
    KvPoolView pool{bytes.data(), d.num_blocks, g};
    for (int32_t r = 0; r < static_cast<int32_t>(c.kv_len.size()); ++r) {
      const int64_t len = c.kv_len[r];
      std::vector<int64_t> positions(len), slots(len);
      std::iota(positions.begin(), positions.end(), int64_t{0});
      const std::vector<int32_t> request(len, r);
      TANDEM_RETURN_IF_ERROR(
          ComputeSlotMapping(c.dcp, rank, positions, request, tables, absl::MakeSpan(slots)));
      TANDEM_RETURN_IF_ERROR(ValidateKvCacheWrite(pool, kLayer, slots.data(), len));
      WriteKvCache(pool, kLayer, slots.data(), len, d.k[r].data(), d.v[r].data());
      WriteKvCache(pool, 0, slots.data(), len, d.v[r].data(), d.k[r].data());
    }
    const AttentionRows rows{
        c.num_rows(), c.row_request.data(), c.row_position.data(), tables, c.dcp, rank};
    TANDEM_RETURN_IF_ERROR(ValidateAttentionCall(pool, kLayer, rows, hq));
    AttentionOutput o;
    o.out.assign(c.num_rows() * hq * c.head_dim, std::nanf(""));
    o.lse.assign(c.num_rows() * hq, std::nanf(""));
    PagedAttention(pool, kLayer, rows, d.q.data(), hq, d.scale, o.out.data(), o.lse.data());
    result.ranks.push_back(std::move(o));
  }
  std::vector<const float*> outs, lses;
  for (const AttentionOutput& o : result.ranks) {
    outs.push_back(o.out.data());
    lses.push_back(o.lse.data());
  }
  result.merged.out.resize(c.num_rows() * hq * c.head_dim);
  result.merged.lse.resize(c.num_rows() * hq);
  MergeAttentionPartials(c.dcp.dcp, outs.data(), lses.data(), c.num_rows() * hq, c.head_dim,
                         result.merged.out.data(), result.merged.lse.data());
  return result;
}

DenseOutput DenseReference(const AttentionCase& c, const AttentionData& d) {
  const int32_t hq = c.num_q_heads();
  const int32_t dim = c.head_dim;
  DenseOutput ref;
  ref.out.assign(c.num_rows() * hq * dim, 0.0);
  ref.lse.assign(c.num_rows() * hq, -INFINITY);
  for (int64_t i = 0; i < c.num_rows(); ++i) {
    if (c.row_position[i] < 0) continue;  // padding: no keys, zeros and −inf
    const int32_t r = c.row_request[i];
    const int64_t keys = c.row_position[i] + 1;
    for (int32_t h = 0; h < hq; ++h) {
      const int32_t kvh = h / c.group_size;
      const float* q = d.q.data() + (i * hq + h) * dim;
      std::vector<double> s(keys);
      for (int64_t t = 0; t < keys; ++t) {
        const double* k = d.k_ref[r].data() + (t * c.num_kv_heads + kvh) * dim;
        double dot = 0;
        for (int32_t x = 0; x < dim; ++x) dot += static_cast<double>(q[x]) * k[x];
        s[t] = dot * d.scale;
      }
      const double m = *std::max_element(s.begin(), s.end());
      double z = 0;
      double* o = ref.out.data() + (i * hq + h) * dim;
      for (int64_t t = 0; t < keys; ++t) {
        const double w = std::exp(s[t] - m);
        z += w;
        const double* v = d.v_ref[r].data() + (t * c.num_kv_heads + kvh) * dim;
        for (int32_t x = 0; x < dim; ++x) o[x] += w * v[x];
      }
      for (int32_t x = 0; x < dim; ++x) o[x] /= z;
      ref.lse[i * hq + h] = m + std::log(z);
    }
  }
  return ref;
}

AttentionError Compare(const AttentionOutput& got, const DenseOutput& want, int32_t head_dim) {
  AttentionError e;
  for (size_t item = 0; item < want.lse.size(); ++item) {
    const float* o = got.out.data() + item * head_dim;
    if (want.lse[item] == -INFINITY) {
      const bool exact = got.lse[item] == -INFINITY &&
                         std::all_of(o, o + head_dim, [](float x) { return x == 0.f; });
      if (!exact) e.out_rel = e.lse_rel = INFINITY;
      continue;
    }
    double diff = 0, norm = 0;
    for (int32_t x = 0; x < head_dim; ++x) {
      const double w = want.out[item * head_dim + x];
      diff += (o[x] - w) * (o[x] - w);
      norm += w * w;
    }
    // NaN compares false with everything: force it to count as a failure.
    const double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
    e.out_rel = std::isnan(rel) ? INFINITY : std::max(e.out_rel, rel);
    const double lse_rel =
        std::abs(got.lse[item] - want.lse[item]) / std::max(1.0, std::abs(want.lse[item]));
    e.lse_rel = std::isnan(lse_rel) ? INFINITY : std::max(e.lse_rel, lse_rel);
  }
  return e;
}

}  // namespace tandem::testing
