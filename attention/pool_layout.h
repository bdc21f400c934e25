// Byte layout of one rank's KV pool (docs/design.md#kv-pool-layout). Pure, host/device-callable.
//
// The pool is one contiguous region; block b starts at b·BlockBytes. Inside a block the order is
// head-major:  [local_kv_head][layer][K=0,V=1][offset_in_block 0..B)[head_dim].
// So a block is `num_kv_heads` contiguous head slabs of layers·2·B·head_dim elements; any head
// sub-range of a block is one contiguous byte range, and a run of consecutive block ids with all
// heads is one range.
#pragma once

#include <cstdint>

#include "attention/hd.h"
#include "attention/kv_dtype.h"

namespace tandem {

struct PoolGeometry {
  int32_t num_kv_heads = 1;  // heads held by this rank (local heads)
  int32_t num_layers = 1;
  int32_t block_size = 16;  // B
  int32_t head_dim = 64;
  KvDType dtype = KvDType::kF32;

  TANDEM_HD constexpr int64_t elem_bytes() const { return KvDTypeBytes(dtype); }
  // Elements of one (head, layer, K|V) row of B tokens.
  TANDEM_HD constexpr int64_t row_elems() const {
    return static_cast<int64_t>(block_size) * head_dim;
  }
  TANDEM_HD constexpr int64_t head_slab_elems() const {
    return static_cast<int64_t>(num_layers) * 2 * row_elems();
  }
  TANDEM_HD constexpr int64_t block_elems() const { return num_kv_heads * head_slab_elems(); }
  TANDEM_HD constexpr int64_t head_slab_bytes() const { return head_slab_elems() * elem_bytes(); }
  TANDEM_HD constexpr int64_t block_bytes() const { return block_elems() * elem_bytes(); }
};

// Element index (not bytes) of the first of head_dim values of (block, head, layer, kv, offset).
TANDEM_HD constexpr int64_t KvElementIndex(const PoolGeometry& g, int64_t block, int32_t head,
                                           int32_t layer, int32_t kv, int32_t offset_in_block) {
  return block * g.block_elems() + head * g.head_slab_elems() +
         (static_cast<int64_t>(layer) * 2 + kv) * g.row_elems() +
         static_cast<int64_t>(offset_in_block) * g.head_dim;
}

// Element index of the K (kv=0) or V (kv=1) row for a global slot (block·B + offset).
TANDEM_HD constexpr int64_t KvSlotElementIndex(const PoolGeometry& g, int64_t slot, int32_t head,
                                               int32_t layer, int32_t kv) {
  return KvElementIndex(g, slot / g.block_size, head, layer, kv,
                        static_cast<int32_t>(slot % g.block_size));
}

TANDEM_HD constexpr int64_t KvByteOffset(const PoolGeometry& g, int64_t block, int32_t head,
                                         int32_t layer, int32_t kv, int32_t offset_in_block) {
  return KvElementIndex(g, block, head, layer, kv, offset_in_block) * g.elem_bytes();
}

struct ByteRange {
  int64_t offset = 0;
  int64_t length = 0;
};

// Heads [head_begin, head_end) of block `block`: one contiguous range.
TANDEM_HD constexpr ByteRange HeadsOfBlock(const PoolGeometry& g, int64_t block, int32_t head_begin,
                                           int32_t head_end) {
  return ByteRange{block * g.block_bytes() + head_begin * g.head_slab_bytes(),
                   (head_end - head_begin) * g.head_slab_bytes()};
}

// All heads of blocks [block_begin, block_end): one contiguous range.
TANDEM_HD constexpr ByteRange BlockRange(const PoolGeometry& g, int64_t block_begin,
                                         int64_t block_end) {
  return ByteRange{block_begin * g.block_bytes(), (block_end - block_begin) * g.block_bytes()};
}

// Pool bytes for `num_blocks` blocks.
TANDEM_HD constexpr int64_t PoolBytes(const PoolGeometry& g, int64_t num_blocks) {
  return num_blocks * g.block_bytes();
}

}  // namespace tandem
