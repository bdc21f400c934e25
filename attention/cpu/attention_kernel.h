// Per-ISA building blocks of the CPU attention (internal to attention/cpu).
//
// attend_tile computes attention for a small tile of queries that share one request and one
// local KV head, over one range of that request's local tokens: it reads each K and V row of the
// range once for all queries of the tile (GQA heads of a decode row, or several prefill rows)
// and keeps a flash-style online softmax per query. The driver (paged_attention.cc) plans tiles,
// splits long ranges across threads and merges split ranges by LSE.
//
// Three implementations exist (attention_kernel_{avx512,avx2,portable}.cc), each compiled with
// its own ISA flags and only ever called after a CPU check (SelectKernels). They share the
// templates of attention_tile_impl.h and attention_tile_query_lanes.h.
//
// Thread-safety: the functions are pure over their arguments; distinct calls may run in parallel
// when their outputs and scratch do not overlap.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention/cpu/cpu_isa.h"
#include "attention/kv_dtype.h"

namespace tandem::attention_cpu {

// Most queries one tile holds (rows × GQA heads); bounds the per-tile softmax state.
inline constexpr int32_t kMaxTileQueries = 16;
// Tokens scored per step of the online softmax (one AVX-512 vector of scores).
inline constexpr int32_t kPieceTokens = 16;

// Tiles of at least this many queries with head_dim 64 or 128 take the query-lanes path on
// AVX-512 and AVX2 (attention_tile_query_lanes.h); smaller ones — decode rows, whose K reads stream
// from DRAM, where that path's per-element broadcasts cost more than the reductions they save —
// keep the key-lanes path.
inline constexpr int32_t kQueryLanesMinQueries = 5;

struct TileArgs {
  // K row of (layer, local KV head) in block id 0, i.e. pool base + that head/layer's offset.
  // The K row of block id b is at kv_base + b·block_bytes: [block_size][head_dim] elements of
  // `dtype`; the V row follows it directly (pool_layout.h).
  const std::byte* kv_base = nullptr;
  int64_t block_bytes = 0;
  // The request's block table: local token j lives in block block_ids[j / block_size], row
  // j mod block_size.
  const int32_t* block_ids = nullptr;
  int32_t block_size = 0;
  int32_t head_dim = 0;
  KvDType dtype = KvDType::kF32;
  // Local tokens [token_begin, token_end) form this call's range.
  int64_t token_begin = 0;
  int64_t token_end = 0;
  int32_t num_queries = 0;          // 1..kMaxTileQueries
  const float* const* q = nullptr;  // [num_queries] → [head_dim] f32
  // [num_queries]: query i attends to local tokens j < visible[i] of the range (causal limit).
  const int64_t* visible = nullptr;
  float scale = 1.f;  // score = scale · q·k
  // [num_queries] → [head_dim]: output normalised over the keys this query saw in the range;
  // zeros when it saw none.
  float* const* out = nullptr;
  // [num_queries] → one float: natural-log LSE of the scores; −inf when it saw no key.
  float* const* lse = nullptr;
  // TileScratchFloats(num_queries, head_dim) floats, owned by the caller.
  float* scratch = nullptr;
};

// Either path fits: key lanes use [nq][2·head_dim + kPieceTokens]; query lanes use
// [head_dim][16] + [nq][head_dim] + [kPieceTokens][16] + [kPieceTokens][head_dim].
inline constexpr int64_t TileScratchFloats(int32_t num_queries, int32_t head_dim) {
  const int64_t d = head_dim;
  return static_cast<int64_t>(num_queries) * (2 * d + kPieceTokens) +
         static_cast<int64_t>(kPieceTokens) * (2 * d + kPieceTokens);
}

struct KernelTable {
  CpuIsa isa;
  // head_dim must be a multiple of this for the table to be used.
  int32_t lanes;
  void (*attend_tile)(const TileArgs& args);
  // Converts n f32 values to `dtype` at dst (n a multiple of `lanes`). Rounds to nearest even.
  void (*store_row)(const float* src, void* dst, int64_t n, KvDType dtype);
};

const KernelTable& Avx512Kernels();
const KernelTable& Avx2Kernels();
const KernelTable& PortableKernels();

// The widest table allowed by `isa` whose lane count divides head_dim. REQUIRES: CpuSupports(isa).
const KernelTable& SelectKernels(CpuIsa isa, int32_t head_dim);

}  // namespace tandem::attention_cpu
