#include "attention/cuda/flashinfer/flashinfer_plan.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "attention/dcp_layout.h"

namespace tandem::gpu::flashinfer_plan {
namespace {

constexpr int64_t kMaxInt32 = std::numeric_limits<int32_t>::max();

template <typename T, size_t N>
bool Contains(const T (&set)[N], T v) {
  return std::find(std::begin(set), std::end(set), v) != std::end(set);
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

FlashInferShape ShapeOf(const PoolGeometry& g, int32_t num_q_heads) {
  return FlashInferShape{.head_dim = g.head_dim,
                         .dtype = g.dtype,
                         .num_q_heads = num_q_heads,
                         .num_kv_heads = g.num_kv_heads,
                         .block_elems = g.block_elems()};
}

absl::Status CheckFlashInferShape(const FlashInferShape& s) {
  if (!Contains(kHeadDims, s.head_dim)) {
    return absl::UnimplementedError(
        absl::StrCat("flashinfer: head_dim ", s.head_dim, " is not instantiated (64, 128)"));
  }
  if (s.dtype != KvDType::kF16 && s.dtype != KvDType::kBF16) {
    return absl::UnimplementedError(absl::StrCat("flashinfer: kv dtype ",
                                                 std::string(KvDTypeName(s.dtype)),
                                                 " is not instantiated (f16, bf16)"));
  }
  if (s.num_kv_heads <= 0 || s.num_q_heads <= 0 || s.num_q_heads % s.num_kv_heads != 0) {
    return absl::UnimplementedError(absl::StrCat("flashinfer: num_q_heads ", s.num_q_heads,
                                                 " is not a multiple of num_kv_heads ",
                                                 s.num_kv_heads));
  }
  const int32_t group = s.num_q_heads / s.num_kv_heads;
  if (!Contains(kGroupSizes, group)) {
    return absl::UnimplementedError(absl::StrCat("flashinfer: GQA group size ", group,
                                                 " is not dispatched (1, 2, 3, 4, 6, 8, 16)"));
  }
  if (s.block_elems <= 0 || s.block_elems > std::numeric_limits<uint32_t>::max()) {
    return absl::UnimplementedError(absl::StrCat("flashinfer: block of ", s.block_elems,
                                                 " elements overflows its uint32 page stride"));
  }
  return absl::OkStatus();
}

PagedKvStrides StridesOf(const PoolGeometry& g, int32_t layer) {
  PagedKvStrides s;
  s.k_offset = KvElementIndex(g, 0, 0, layer, 0, 0);
  s.v_offset = KvElementIndex(g, 0, 0, layer, 1, 0);
  s.stride_page = g.block_elems();
  s.stride_h = g.head_slab_elems();
  s.stride_n = g.head_dim;
  return s;
}

absl::StatusOr<PagedKvBatch> BuildPagedKvBatch(const AttentionRows& rows, bool causal_runs) {
  PagedKvBatch b;
  const int32_t block = rows.dcp.block_size;
  const bool runs = causal_runs && rows.dcp.dcp == 1;
  b.qo_indptr.push_back(0);
  b.kv_indptr.push_back(0);
  b.row_keys.resize(static_cast<size_t>(rows.num_rows));
  int64_t run_begin = 0;  // first row of the open sequence
  auto close = [&](int64_t end_row, int64_t keys, int32_t req) -> absl::Status {
    const int64_t pages = CeilDiv(keys, block);
    if (static_cast<int64_t>(b.kv_indices.size()) + pages > kMaxInt32 || end_row > kMaxInt32) {
      return absl::InvalidArgumentError(
          absl::StrCat("flashinfer: more than ", kMaxInt32, " pages or rows in one call"));
    }
    if (pages > 0) {
      const int32_t* table = rows.tables.table(req);
      b.kv_indices.insert(b.kv_indices.end(), table, table + pages);
    }
    b.kv_indptr.push_back(static_cast<int32_t>(b.kv_indices.size()));
    b.last_page_len.push_back(pages == 0 ? 0 : static_cast<int32_t>(keys - (pages - 1) * block));
    b.qo_indptr.push_back(static_cast<int32_t>(end_row));
    b.max_kv_len = std::max(b.max_kv_len, keys);
    b.max_qo_len = std::max(b.max_qo_len, static_cast<int32_t>(end_row - run_begin));
    run_begin = end_row;
    return absl::OkStatus();
  };
  for (int64_t r = 0; r < rows.num_rows; ++r) {
    const int64_t pos = rows.position[r];
    const int64_t keys = pos < 0 ? 0 : LocalLen(rows.dcp, rows.dcp_rank, pos + 1);
    b.row_keys[static_cast<size_t>(r)] = static_cast<int32_t>(keys);
    const bool continues = runs && pos >= 0 && r + 1 < rows.num_rows &&
                           rows.position[r + 1] == pos + 1 &&
                           rows.request[r + 1] == rows.request[r];
    if (continues) continue;
    // A run's sequence holds the keys of its last row (dcp == 1: position + 1).
    if (absl::Status s = close(r + 1, keys, pos < 0 ? 0 : rows.request[r]); !s.ok()) return s;
  }
  return b;
}

DecodeWork PlanDecodeWork(const PagedKvBatch& batch, int32_t num_kv_heads, int32_t block_size) {
  DecodeWork w;
  const int32_t seqs = batch.num_sequences();
  const int64_t natural = int64_t{seqs} * num_kv_heads;
  int64_t chunk = batch.max_kv_len;
  if (natural > 0 && natural < kDecodeTargetCtas && batch.max_kv_len > kDecodeMinChunk) {
    const int64_t tiles = CeilDiv(kDecodeTargetCtas, natural);
    chunk = std::max(kDecodeMinChunk, CeilDiv(batch.max_kv_len, tiles));
    chunk = CeilDiv(chunk, block_size) * block_size;
  }
  w.partition_kv = chunk < batch.max_kv_len;
  w.o_indptr.push_back(0);
  if (!w.partition_kv) {
    // Every sequence is one CTA, its output row its sequence index.
    for (int32_t s = 0; s < seqs; ++s) {
      w.request.push_back(s);
      w.tile.push_back(0);
      w.o_indptr.push_back(s + 1);
    }
    w.kv_chunk = static_cast<int32_t>(std::max<int64_t>(batch.max_kv_len, 1));
    return w;
  }
  w.kv_chunk = static_cast<int32_t>(chunk);
  for (int32_t s = 0; s < seqs; ++s) {
    const int64_t len =
        batch.kv_indptr[s + 1] == batch.kv_indptr[s]
            ? 0
            : int64_t{batch.kv_indptr[s + 1] - batch.kv_indptr[s] - 1} * block_size +
                  batch.last_page_len[s];
    // Like FlashInfer's own planner, an empty sequence still gets one (empty) tile.
    const int64_t tiles = std::max<int64_t>(1, CeilDiv(len, chunk));
    for (int64_t t = 0; t < tiles; ++t) {
      w.request.push_back(s);
      w.tile.push_back(static_cast<int32_t>(t));
    }
    w.o_indptr.push_back(static_cast<int32_t>(w.request.size()));
  }
  return w;
}

PrefillWork PlanPrefillWork(const PagedKvBatch& batch, int32_t group_size, int32_t cta_tile_q) {
  PrefillWork w;
  for (int32_t s = 0; s < batch.num_sequences(); ++s) {
    const int64_t packed = int64_t{batch.qo_indptr[s + 1] - batch.qo_indptr[s]} * group_size;
    const int64_t tiles = CeilDiv(packed, cta_tile_q);
    for (int64_t t = 0; t < tiles; ++t) {
      w.request.push_back(s);
      w.q_tile.push_back(static_cast<int32_t>(t));
    }
  }
  return w;
}

FlashInferKernel ChooseKernel(const PagedKvBatch& batch) {
  return batch.max_qo_len > 1 ? FlashInferKernel::kPrefill : FlashInferKernel::kDecode;
}

PathChoice ChoosePath(bool selected, bool built, const FlashInferShape& shape) {
  if (!selected) return {};
  if (!built) {
    return {false,
            "flashinfer: selected but not built into this binary (deploy/fetch-flashinfer.sh)"};
  }
  if (absl::Status s = CheckFlashInferShape(shape); !s.ok()) {
    return {false, std::string(s.message())};
  }
  return {true, ""};
}

PackedPlan PackPlan(const PagedKvBatch& batch, const DecodeWork& decode, const PrefillWork& prefill,
                    std::vector<int32_t>& blob) {
  PackedPlan p;
  blob.clear();
  auto put = [&](const std::vector<int32_t>& v) {
    const int64_t at = static_cast<int64_t>(blob.size());
    blob.insert(blob.end(), v.begin(), v.end());
    blob.resize(static_cast<size_t>(CeilDiv(static_cast<int64_t>(blob.size()), 4) * 4), 0);
    return at;
  };
  const bool is_prefill = !prefill.request.empty();
  p.qo_indptr = put(batch.qo_indptr);
  p.kv_indptr = put(batch.kv_indptr);
  p.kv_indices = put(batch.kv_indices);
  p.last_page_len = put(batch.last_page_len);
  p.row_keys = put(batch.row_keys);
  p.request = put(is_prefill ? prefill.request : decode.request);
  if (is_prefill) {
    p.q_tile = put(prefill.q_tile);
    // No key partition: every CTA covers its sequence's keys (tile 0), and sequence s is
    // written at its own query rows (o_indptr = qo_indptr).
    p.kv_tile = put(std::vector<int32_t>(prefill.request.size(), 0));
    p.o_indptr = put(batch.qo_indptr);
    p.kv_chunk = put({static_cast<int32_t>(std::max<int64_t>(batch.max_kv_len, 1))});
  } else {
    p.kv_tile = put(decode.tile);
    p.q_tile = p.kv_tile;  // unused by the decode kernel
    p.o_indptr = put(decode.o_indptr);
    p.kv_chunk = put({decode.kv_chunk});
  }
  p.ints = static_cast<int64_t>(blob.size());
  return p;
}

IoPlan PlanIo(KvDType kv, bool bf16_io, int32_t q_alignment, int32_t out_alignment) {
  const bool same_dtype = bf16_io && kv == KvDType::kBF16;
  return IoPlan{same_dtype && q_alignment >= 16, same_dtype && out_alignment >= 16};
}

}  // namespace tandem::gpu::flashinfer_plan
