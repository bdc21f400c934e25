// The FlashInfer path's host planning (pure; runs without a GPU). The central check emulates
// FlashInfer's reading of a paged-KV description — paged_kv_t::get_length, the flat page walk
// (token t of sequence s at indices[indptr[s] + t / B]·B + t mod B) and the bottom-right causal
// mask of its prefill — and requires that every row then attends exactly the slots Tandem's own
// kernels attend (SlotOfLocal of j < LocalLen(position + 1)), over DCP interleaves, partial last
// blocks, padding rows and several requests. Work lists must cover every key / query once.
#include "attention/cuda/flashinfer/flashinfer_plan.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "attention/dcp_layout.h"
#include "gtest/gtest.h"

namespace tandem::gpu::flashinfer_plan {
namespace {

struct Batch {
  std::vector<int32_t> request;
  std::vector<int64_t> position;
  std::vector<int32_t> ids;
  std::vector<int64_t> offsets;
  AttentionRows rows(DcpGeometry dcp, int32_t rank) const {
    return AttentionRows{
        static_cast<int64_t>(request.size()),
        request.data(),
        position.data(),
        BlockTablesView{ids.data(), offsets.data(), static_cast<int32_t>(offsets.size()) - 1},
        dcp,
        rank};
  }
};

// Three requests with distinct block ids: request 0 prefills positions 0..len0−1, request 1
// decodes at pos1, request 2 prefills a chunk [from2, to2); padding rows interleaved.
Batch MakeBatch(const DcpGeometry& g, int64_t len0, int64_t pos1, int64_t from2, int64_t to2) {
  Batch b;
  const int64_t blocks[3] = {VirtualBlocksFor(g, len0), VirtualBlocksFor(g, pos1 + 1),
                             VirtualBlocksFor(g, to2)};
  int32_t next = 7;  // block ids not starting at 0, not contiguous across requests
  b.offsets.push_back(0);
  for (int r = 0; r < 3; ++r) {
    for (int64_t i = 0; i < blocks[r]; ++i) b.ids.push_back(next += 3);
    b.offsets.push_back(static_cast<int64_t>(b.ids.size()));
  }
  b.request.push_back(0);
  b.position.push_back(-1);  // leading padding row
  for (int64_t p = 0; p < len0; ++p) {
    b.request.push_back(0);
    b.position.push_back(p);
  }
  b.request.push_back(1);
  b.position.push_back(pos1);
  b.request.push_back(0);
  b.position.push_back(-3);  // padding between requests
  for (int64_t p = from2; p < to2; ++p) {
    b.request.push_back(2);
    b.position.push_back(p);
  }
  return b;
}

// Slots FlashInfer reads for every row of `fb` (its semantics, emulated).
std::vector<std::vector<int64_t>> FlashInferSlots(const PagedKvBatch& fb, int32_t block) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(fb.num_rows()));
  for (int32_t s = 0; s < fb.num_sequences(); ++s) {
    const int32_t pages = fb.kv_indptr[s + 1] - fb.kv_indptr[s];
    const int64_t kv_len = pages == 0 ? 0 : int64_t{pages - 1} * block + fb.last_page_len[s];
    const int32_t qo_len = fb.qo_indptr[s + 1] - fb.qo_indptr[s];
    for (int32_t i = 0; i < qo_len; ++i) {
      const int64_t sees = kv_len - qo_len + i + 1;  // causal, aligned bottom-right
      auto& slots = out[static_cast<size_t>(fb.qo_indptr[s] + i)];
      for (int64_t t = 0; t < sees; ++t) {
        slots.push_back(int64_t{fb.kv_indices[fb.kv_indptr[s] + t / block]} * block + t % block);
      }
    }
  }
  return out;
}

std::vector<int64_t> TandemSlots(const AttentionRows& rows, int64_t r) {
  std::vector<int64_t> slots;
  const int64_t pos = rows.position[r];
  if (pos < 0) return slots;
  const int32_t* table = rows.tables.table(rows.request[r]);
  const int64_t n = LocalLen(rows.dcp, rows.dcp_rank, pos + 1);
  for (int64_t j = 0; j < n; ++j) slots.push_back(SlotOfLocal(rows.dcp, j, table));
  return slots;
}

TEST(FlashInferPlanTest, EveryRowAttendsExactlyTandemsSlots) {
  for (const int32_t block : {1, 4, 16}) {
    for (const int32_t dcp : {1, 2, 4}) {
      for (const int32_t interleave : {1, 2, 4}) {
        if (block % interleave != 0) continue;
        const DcpGeometry g{block, dcp, interleave};
        // Partial last blocks everywhere: lengths not multiples of B·N.
        const Batch b = MakeBatch(g, 2 * block * dcp + 3, 5 * block + 1, 9, 9 + 2 * block + 1);
        for (int32_t rank = 0; rank < dcp; ++rank) {
          for (const bool causal_runs : {false, true}) {
            SCOPED_TRACE("B=" + std::to_string(block) + " N=" + std::to_string(dcp) +
                         " I=" + std::to_string(interleave) + " rank=" + std::to_string(rank) +
                         " runs=" + std::to_string(causal_runs));
            const AttentionRows rows = b.rows(g, rank);
            const absl::StatusOr<PagedKvBatch> fb = BuildPagedKvBatch(rows, causal_runs);
            ASSERT_TRUE(fb.ok()) << fb.status();
            ASSERT_EQ(fb->num_rows(), rows.num_rows);
            ASSERT_EQ(fb->qo_indptr.back(), rows.num_rows);
            const auto got = FlashInferSlots(*fb, block);
            for (int64_t r = 0; r < rows.num_rows; ++r) {
              const std::vector<int64_t> want = TandemSlots(rows, r);
              EXPECT_EQ(got[static_cast<size_t>(r)], want) << "row " << r;
              EXPECT_EQ(fb->row_keys[static_cast<size_t>(r)], static_cast<int32_t>(want.size()));
              if (rows.position[r] < 0) {
                EXPECT_EQ(fb->row_keys[static_cast<size_t>(r)], 0);
              }
            }
            for (int32_t s = 0; s < fb->num_sequences(); ++s) {
              const int32_t pages = fb->kv_indptr[s + 1] - fb->kv_indptr[s];
              if (pages > 0) {
                EXPECT_GE(fb->last_page_len[s], 1);
                EXPECT_LE(fb->last_page_len[s], block);
              }
            }
            // Runs only without DCP; decode (one row per sequence) otherwise.
            if (!causal_runs || dcp > 1) {
              EXPECT_EQ(fb->max_qo_len, 1);
              EXPECT_EQ(ChooseKernel(*fb), FlashInferKernel::kDecode);
            } else {
              EXPECT_EQ(fb->max_qo_len, 2 * block * dcp + 3);
              EXPECT_EQ(ChooseKernel(*fb), FlashInferKernel::kPrefill);
            }
          }
        }
      }
    }
  }
}

TEST(FlashInferPlanTest, RunsBreakAtGapsRequestsAndPadding) {
  Batch b;
  b.offsets = {0, 2, 4};
  b.ids = {3, 5, 8, 9};
  b.request = {0, 0, 0, 1, 1, 0};
  b.position = {0, 1, 3, 4, 5, -1};  // gap 1→3; request switch; padding
  const absl::StatusOr<PagedKvBatch> fb = BuildPagedKvBatch(b.rows(DcpGeometry{4, 1, 1}, 0), true);
  ASSERT_TRUE(fb.ok()) << fb.status();
  EXPECT_EQ(fb->qo_indptr, (std::vector<int32_t>{0, 2, 3, 5, 6}));
  EXPECT_EQ(fb->kv_indptr, (std::vector<int32_t>{0, 1, 2, 4, 4}));
  EXPECT_EQ(fb->kv_indices, (std::vector<int32_t>{3, 3, 8, 9}));
  EXPECT_EQ(fb->last_page_len, (std::vector<int32_t>{2, 4, 2, 0}));
  EXPECT_EQ(fb->row_keys, (std::vector<int32_t>{1, 2, 4, 5, 6, 0}));
  EXPECT_EQ(fb->max_kv_len, 6);
  EXPECT_EQ(fb->max_qo_len, 2);
}

TEST(FlashInferPlanTest, StridesAddressTheSameElementsAsThePoolLayout) {
  for (const KvDType dtype : {KvDType::kF16, KvDType::kBF16}) {
    const PoolGeometry g{3, 2, 4, 64, dtype};
    for (int32_t layer = 0; layer < g.num_layers; ++layer) {
      const PagedKvStrides s = StridesOf(g, layer);
      for (int64_t block : {0, 1, 5}) {
        for (int32_t head = 0; head < g.num_kv_heads; ++head) {
          for (int32_t off = 0; off < g.block_size; ++off) {
            const int64_t rel = block * s.stride_page + head * s.stride_h + off * s.stride_n;
            EXPECT_EQ(s.k_offset + rel, KvElementIndex(g, block, head, layer, 0, off));
            EXPECT_EQ(s.v_offset + rel, KvElementIndex(g, block, head, layer, 1, off));
          }
        }
      }
    }
  }
}

TEST(FlashInferPlanTest, ShapesOutsideTheInstantiatedSetAreNamed) {
  const PoolGeometry ok{2, 4, 16, 128, KvDType::kBF16};
  EXPECT_TRUE(CheckFlashInferShape(ShapeOf(ok, 8)).ok());
  EXPECT_TRUE(CheckFlashInferShape(ShapeOf(PoolGeometry{3, 30, 16, 64, KvDType::kF16}, 9)).ok());
  struct Case {
    PoolGeometry g;
    int32_t q_heads;
    std::string field;
  };
  const Case cases[] = {
      {{2, 4, 16, 96, KvDType::kBF16}, 8, "head_dim 96"},
      {{2, 4, 16, 128, KvDType::kF32}, 8, "kv dtype f32"},
      {{2, 4, 16, 128, KvDType::kBF16}, 7, "num_q_heads 7"},
      {{2, 4, 16, 128, KvDType::kBF16}, 10, "group size 5"},
      {{2, 4, 16, 128, KvDType::kBF16}, 64, "group size 32"},
      {{64, 256, 1024, 128, KvDType::kBF16}, 64, "uint32 page stride"},
  };
  for (const Case& c : cases) {
    const absl::Status s = CheckFlashInferShape(ShapeOf(c.g, c.q_heads));
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << c.field;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
  }
}

TEST(FlashInferPlanTest, PathIsChosenOnlyWhenSelectedBuiltAndSupported) {
  const FlashInferShape good = ShapeOf(PoolGeometry{2, 4, 16, 64, KvDType::kF16}, 6);
  const FlashInferShape f32 = ShapeOf(PoolGeometry{2, 4, 16, 64, KvDType::kF32}, 6);
  EXPECT_FALSE(ChoosePath(false, true, good).flashinfer);
  EXPECT_TRUE(ChoosePath(false, true, good).fallback.empty()) << "not selected: nothing to log";
  EXPECT_TRUE(ChoosePath(true, true, good).flashinfer);
  const PathChoice absent = ChoosePath(true, false, good);
  EXPECT_FALSE(absent.flashinfer);
  EXPECT_NE(absent.fallback.find("fetch-flashinfer"), std::string::npos) << absent.fallback;
  const PathChoice dtype = ChoosePath(true, true, f32);
  EXPECT_FALSE(dtype.flashinfer);
  EXPECT_NE(dtype.fallback.find("f32"), std::string::npos) << dtype.fallback;
}

// Every key of every sequence is in exactly one decode tile, tiles are whole pages, and a
// sequence's partials are o_indptr[s] .. o_indptr[s + 1].
TEST(FlashInferPlanTest, DecodeTilesCoverEveryKeyOnce) {
  for (const int32_t block : {1, 16}) {
    for (const int32_t kv_heads : {1, 8}) {
      for (const int64_t len : {0, 1, 255, 256, 257, 4097, 100000}) {
        for (const int32_t seqs : {1, 3, 200}) {
          SCOPED_TRACE("B=" + std::to_string(block) + " heads=" + std::to_string(kv_heads) +
                       " len=" + std::to_string(len) + " seqs=" + std::to_string(seqs));
          PagedKvBatch fb;
          fb.qo_indptr.push_back(0);
          fb.kv_indptr.push_back(0);
          for (int32_t s = 0; s < seqs; ++s) {
            const int64_t l = s == 1 ? len / 2 : len;  // sequences of different lengths
            const int64_t pages = (l + block - 1) / block;
            fb.kv_indptr.push_back(fb.kv_indptr.back() + static_cast<int32_t>(pages));
            fb.last_page_len.push_back(pages == 0 ? 0
                                                  : static_cast<int32_t>(l - (pages - 1) * block));
            fb.qo_indptr.push_back(s + 1);
            fb.row_keys.push_back(static_cast<int32_t>(l));
            fb.max_kv_len = std::max(fb.max_kv_len, l);
          }
          fb.max_qo_len = 1;
          const DecodeWork w = PlanDecodeWork(fb, kv_heads, block);
          ASSERT_EQ(static_cast<int32_t>(w.o_indptr.size()), seqs + 1);
          ASSERT_EQ(w.o_indptr.back(), w.num_ctas());
          if (!w.partition_kv) {
            for (int32_t c = 0; c < w.num_ctas(); ++c) EXPECT_EQ(w.request[c], c);
            EXPECT_GE(w.kv_chunk, 1);
            continue;
          }
          EXPECT_EQ(w.kv_chunk % block, 0);
          EXPECT_GE(w.kv_chunk, kDecodeMinChunk);
          for (int32_t s = 0; s < seqs; ++s) {
            const int64_t l = fb.row_keys[s];
            int64_t covered = 0;
            for (int32_t c = w.o_indptr[s]; c < w.o_indptr[s + 1]; ++c) {
              ASSERT_EQ(w.request[c], s);
              ASSERT_EQ(w.tile[c], c - w.o_indptr[s]);
              const int64_t begin = int64_t{w.tile[c]} * w.kv_chunk;
              const int64_t end = std::min<int64_t>(begin + w.kv_chunk, l);
              EXPECT_EQ(begin, covered) << "gap or overlap at tile " << w.tile[c];
              covered = std::max(covered, end);
            }
            EXPECT_EQ(covered, l);
            EXPECT_GE(w.o_indptr[s + 1] - w.o_indptr[s], 1) << "a sequence without a CTA";
          }
          EXPECT_LT(int64_t{seqs} * kv_heads, kDecodeTargetCtas) << "partitioned a full GPU";
        }
      }
    }
  }
}

TEST(FlashInferPlanTest, PrefillTilesCoverEveryPackedQueryRowOnce) {
  PagedKvBatch fb;
  fb.qo_indptr = {0, 1, 65, 65 + 130};
  fb.kv_indptr = {0, 1, 2, 3};
  fb.last_page_len = {1, 1, 1};
  for (const int32_t group : {1, 3, 8}) {
    const PrefillWork w = PlanPrefillWork(fb, group, kPrefillCtaTileQ);
    for (int32_t s = 0; s < 3; ++s) {
      const int64_t packed = int64_t{fb.qo_indptr[s + 1] - fb.qo_indptr[s]} * group;
      std::vector<int32_t> tiles;
      for (int32_t c = 0; c < w.num_ctas(); ++c) {
        if (w.request[c] == s) tiles.push_back(w.q_tile[c]);
      }
      ASSERT_EQ(static_cast<int64_t>(tiles.size()),
                (packed + kPrefillCtaTileQ - 1) / kPrefillCtaTileQ);
      for (size_t t = 0; t < tiles.size(); ++t) EXPECT_EQ(tiles[t], static_cast<int32_t>(t));
    }
  }
}

TEST(FlashInferPlanTest, PackedPlanHoldsEveryArrayAligned) {
  Batch b;
  b.offsets = {0, 3};
  b.ids = {4, 6, 2};
  b.request = {0, 0, 0};
  b.position = {40, 41, 42};
  const absl::StatusOr<PagedKvBatch> fb = BuildPagedKvBatch(b.rows(DcpGeometry{16, 1, 1}, 0), true);
  ASSERT_TRUE(fb.ok());
  const PrefillWork pw = PlanPrefillWork(*fb, 2, kPrefillCtaTileQ);
  std::vector<int32_t> blob;
  const PackedPlan p = PackPlan(*fb, DecodeWork{}, pw, blob);
  EXPECT_EQ(p.ints, static_cast<int64_t>(blob.size()));
  for (int64_t off : {p.qo_indptr, p.kv_indptr, p.kv_indices, p.last_page_len, p.row_keys,
                      p.request, p.q_tile, p.kv_tile, p.o_indptr, p.kv_chunk}) {
    EXPECT_EQ(off % 4, 0) << "not 16-byte aligned";
    EXPECT_LT(off, p.ints);
  }
  EXPECT_EQ(blob[p.kv_indices + 2], 2);
  EXPECT_EQ(blob[p.last_page_len], 43 - 32);
  EXPECT_EQ(blob[p.o_indptr + 1], 3) << "prefill writes at the query rows";
  EXPECT_EQ(blob[p.kv_tile], 0);
  EXPECT_EQ(blob[p.kv_chunk], 43);
}

// bf16 activations over a bf16 pool: q and out go straight to FlashInfer; any other dtype pair
// or a misaligned pointer goes through scratch on that side only.
TEST(FlashInferPlanTest, IoIsDirectOnlyForBf16ActivationsOverABf16Pool) {
  const IoPlan direct = PlanIo(KvDType::kBF16, /*bf16_io=*/true, 256, 16);
  EXPECT_TRUE(direct.q_direct);
  EXPECT_TRUE(direct.out_direct);
  for (KvDType kv : {KvDType::kF16, KvDType::kBF16}) {
    const IoPlan f32 = PlanIo(kv, /*bf16_io=*/false, 256, 256);
    EXPECT_FALSE(f32.q_direct);
    EXPECT_FALSE(f32.out_direct);
  }
  const IoPlan f16 = PlanIo(KvDType::kF16, /*bf16_io=*/true, 256, 256);
  EXPECT_FALSE(f16.q_direct);
  EXPECT_FALSE(f16.out_direct);
  const IoPlan q_misaligned = PlanIo(KvDType::kBF16, true, 8, 256);
  EXPECT_FALSE(q_misaligned.q_direct);
  EXPECT_TRUE(q_misaligned.out_direct);
  const IoPlan out_misaligned = PlanIo(KvDType::kBF16, true, 16, 2);
  EXPECT_TRUE(out_misaligned.q_direct);
  EXPECT_FALSE(out_misaligned.out_direct);
}

TEST(FlashInferPlanTest, Base2LseConvertsToNaturalLog) {
  const std::vector<float> scores = {-3.5f, 0.25f, 2.f, 7.75f};
  double natural = 0, base2 = 0;
  for (float s : scores) {
    natural += std::exp(double{s});
    base2 += std::exp2(double{s} * kLog2E);  // FlashInfer's form: 2^(s·log2 e)
  }
  const float lse2 = static_cast<float>(std::log2(base2));
  // |Δ| ≤ two float roundings of a value near 7.8 plus the product's: 3·2^-24·8.
  EXPECT_NEAR(Log2LseToNatural(lse2), std::log(natural), 3 * 8 * std::ldexp(1.0, -24));
  EXPECT_NEAR(NaturalLseToLog2(Log2LseToNatural(lse2)), lse2, 4 * 12 * std::ldexp(1.0, -24));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(Log2LseToNatural(-inf), -inf);
  EXPECT_EQ(NaturalLseToLog2(-inf), -inf);
}

}  // namespace
}  // namespace tandem::gpu::flashinfer_plan
