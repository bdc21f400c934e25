// Arguments of a paged attention call, shared by the CPU and CUDA kernels: a view of one rank's
// KV pool and the query rows' metadata (docs/design.md#kv-pool-layout, #rank-local-attention).
// Pointers inside are raw: the pool base is device memory of the backend that runs the kernel; the
// row metadata is host memory.
#pragma once

#include <cstdint>

#include "attention/dcp_layout.h"
#include "attention/pool_layout.h"

namespace tandem {

// One rank's pool. `base` points at block 0; the pool holds `num_blocks` blocks.
struct KvPoolView {
  void* base = nullptr;
  int64_t num_blocks = 0;
  PoolGeometry geometry;
};

// The query rows of one attention call.
struct AttentionRows {
  int64_t num_rows = 0;
  const int32_t* request = nullptr;  // [num_rows] index into `tables`
  // [num_rows] global position of the row's token. A negative position marks a padding row
  // (collectives pad ranks to equal row counts): it has no keys, so lse = −inf and output 0,
  // and its request index and block table are not read.
  const int64_t* position = nullptr;
  BlockTablesView tables;
  DcpGeometry dcp;  // the group's placement (B must equal geometry.block_size)
  int32_t dcp_rank = 0;
};

}  // namespace tandem
