// ValidateAttentionCall and ValidateKvCacheWrite: the checks the hot-path kernels skip.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "attention/cpu/paged_attention.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

absl::Status ValidatePool(const KvPoolView& pool, int32_t layer) {
  const PoolGeometry& g = pool.geometry;
  if (g.num_kv_heads < 1 || g.num_layers < 1 || g.block_size < 1 || g.head_dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pool geometry needs num_kv_heads, num_layers, block_size and head_dim >= 1 (got ",
        g.num_kv_heads, ", ", g.num_layers, ", ", g.block_size, ", ", g.head_dim, ")"));
  }
  if (g.dtype != KvDType::kF32 && g.dtype != KvDType::kF16 && g.dtype != KvDType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool dtype ", static_cast<int>(g.dtype), " is not f32, f16 or bf16"));
  }
  if (pool.num_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat("pool num_blocks=", pool.num_blocks, " < 0"));
  }
  if (pool.num_blocks > 0 && pool.base == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool base is null but num_blocks=", pool.num_blocks));
  }
  if (layer < 0 || layer >= g.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer, " is outside the pool's [0, ", g.num_layers, ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateTables(const BlockTablesView& t) {
  if (t.num_requests < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_requests=", t.num_requests, " < 0"));
  }
  if (t.num_requests > 0 && t.offsets == nullptr) {
    return absl::InvalidArgumentError("block table offsets are null");
  }
  for (int32_t r = 0; r < t.num_requests; ++r) {
    if (t.offsets[r] < 0 || t.offsets[r + 1] < t.offsets[r]) {
      return absl::InvalidArgumentError(absl::StrCat("block table offsets of request ", r, " (",
                                                     t.offsets[r], ", ", t.offsets[r + 1],
                                                     ") are negative or decreasing"));
    }
  }
  if (t.num_requests > 0 && t.offsets[t.num_requests] > t.offsets[0] && t.ids == nullptr) {
    return absl::InvalidArgumentError("block table ids are null");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateAttentionCall(const KvPoolView& pool, int32_t layer, const AttentionRows& rows,
                                   int32_t num_q_heads) {
  TANDEM_RETURN_IF_ERROR(ValidatePool(pool, layer));
  const PoolGeometry& g = pool.geometry;
  const absl::Status dcp = ValidateDcpGeometry(rows.dcp);
  if (!dcp.ok()) return absl::InvalidArgumentError(absl::StrCat("dcp geometry: ", dcp.message()));
  if (rows.dcp.block_size != g.block_size) {
    return absl::InvalidArgumentError(absl::StrCat("dcp block_size B=", rows.dcp.block_size,
                                                   " differs from the pool's block_size ",
                                                   g.block_size));
  }
  if (rows.dcp_rank < 0 || rows.dcp_rank >= rows.dcp.dcp) {
    return absl::InvalidArgumentError(
        absl::StrCat("dcp_rank ", rows.dcp_rank, " is outside [0, ", rows.dcp.dcp, ")"));
  }
  if (num_q_heads < 1 || num_q_heads % g.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_q_heads=", num_q_heads,
                                                   " is not a positive multiple of the pool's "
                                                   "num_kv_heads=",
                                                   g.num_kv_heads));
  }
  if (rows.num_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_rows=", rows.num_rows, " < 0"));
  }
  if (rows.num_rows == 0) return absl::OkStatus();
  if (rows.request == nullptr || rows.position == nullptr) {
    return absl::InvalidArgumentError("row request or position array is null");
  }
  TANDEM_RETURN_IF_ERROR(ValidateTables(rows.tables));

  // The furthest position each request is attended at decides how much of its table is read.
  std::vector<int64_t> furthest(rows.tables.num_requests, -1);
  for (int64_t i = 0; i < rows.num_rows; ++i) {
    const int64_t p = rows.position[i];
    if (p < 0) continue;  // padding row: no keys, request index unused
    const int32_t r = rows.request[i];
    if (r < 0 || r >= rows.tables.num_requests) {
      return absl::InvalidArgumentError(absl::StrCat("row ", i, ": request ", r, " is outside [0, ",
                                                     rows.tables.num_requests, ")"));
    }
    const int64_t needed = VirtualBlocksFor(rows.dcp, p + 1);
    if (rows.tables.num_blocks(r) < needed) {
      return absl::InvalidArgumentError(absl::StrCat("row ", i, ": position ", p, " needs ", needed,
                                                     " block table entries but request ", r,
                                                     " has ", rows.tables.num_blocks(r)));
    }
    furthest[r] = std::max(furthest[r], p);
  }
  for (int32_t r = 0; r < rows.tables.num_requests; ++r) {
    if (furthest[r] < 0) continue;
    const int32_t* table = rows.tables.table(r);
    const int64_t used = VirtualBlocksFor(rows.dcp, furthest[r] + 1);
    for (int64_t e = 0; e < used; ++e) {
      if (table[e] < 0 || table[e] >= pool.num_blocks) {
        return absl::InvalidArgumentError(
            absl::StrCat("block id ", table[e], " at entry ", e, " of request ", r,
                         "'s block table is outside the pool [0, ", pool.num_blocks, ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateKvCacheWrite(const KvPoolView& pool, int32_t layer, const int64_t* slots,
                                  int64_t num_rows) {
  TANDEM_RETURN_IF_ERROR(ValidatePool(pool, layer));
  if (num_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_rows=", num_rows, " < 0"));
  }
  if (num_rows > 0 && slots == nullptr) return absl::InvalidArgumentError("slots are null");
  const int64_t num_slots = pool.num_blocks * pool.geometry.block_size;
  for (int64_t i = 0; i < num_rows; ++i) {
    if (slots[i] < -1 || slots[i] >= num_slots) {
      return absl::InvalidArgumentError(absl::StrCat("row ", i, ": slot ", slots[i],
                                                     " is outside the pool [0, ", num_slots,
                                                     ") and is not -1"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem
