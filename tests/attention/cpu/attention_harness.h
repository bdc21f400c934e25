// Test harness for the CPU attention: builds a batch, shards its KV over an N-rank DCP group the
// way the engines do (ComputeSlotMapping + WriteKvCache into N pools with shuffled block ids),
// runs PagedAttention on every rank, merges the partials by LSE, and computes the dense
// double-precision softmax reference over the unsharded KV.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "attention/dcp_layout.h"
#include "attention/kv_dtype.h"

namespace tandem::testing {

struct AttentionCase {
  DcpGeometry dcp;
  int32_t num_kv_heads = 1;
  int32_t group_size = 1;  // query heads per KV head
  int32_t head_dim = 16;
  KvDType dtype = KvDType::kF32;
  std::vector<int64_t> kv_len;       // per request: positions [0, kv_len) are in the cache
  std::vector<int32_t> row_request;  // the call's rows, in call order
  std::vector<int64_t> row_position;
  uint64_t seed = 1;

  int32_t num_q_heads() const { return num_kv_heads * group_size; }
  int64_t num_rows() const { return static_cast<int64_t>(row_request.size()); }
  std::string Describe() const;
};

// A case with the given shape, KV dtype and seed and no requests yet (add them below).
AttentionCase MakeCase(DcpGeometry dcp, int32_t num_kv_heads, int32_t group_size, int32_t head_dim,
                       KvDType dtype, uint64_t seed);

// Adds a decode row for a request whose cache holds `context` earlier tokens: the row is the new
// token at position `context`, written before attending, so the request's kv_len is context + 1.
void AddDecodeRequest(AttentionCase& c, int64_t context);
// Adds a padding row (negative position) with a request index that must never be read.
void AddPaddingRow(AttentionCase& c);
// Adds a prefill request of `length` tokens whose last `rows` tokens are the current chunk
// (rows at positions length − rows .. length − 1; the earlier ones are cached).
void AddPrefillRequest(AttentionCase& c, int64_t length, int64_t rows);

struct AttentionData {
  std::vector<std::vector<float>> k, v;  // per request [kv_len][num_kv_heads][head_dim], f32
  std::vector<std::vector<double>> k_ref, v_ref;  // the same values rounded to the KV dtype
  std::vector<float> q;                           // [rows][num_q_heads][head_dim]
  std::vector<int32_t> table_ids;                 // shuffled block ids, CSR by request
  std::vector<int64_t> table_offsets;
  int64_t num_blocks = 0;  // pool size; a few ids stay unused
  float scale = 1.f;
};
AttentionData MakeData(const AttentionCase& c);

struct AttentionOutput {
  std::vector<float> out;  // [rows][num_q_heads][head_dim]
  std::vector<float> lse;  // [rows][num_q_heads]
};
struct ShardedOutput {
  AttentionOutput merged;
  std::vector<AttentionOutput> ranks;  // each rank's partial, before the merge
};
// Pools start filled with NaN, so reading an unwritten slot shows up in the output. The
// attention reads layer 1; layer 0 holds different data (K and V swapped).
absl::StatusOr<ShardedOutput> RunSharded(const AttentionCase& c, const AttentionData& d);

struct DenseOutput {
  std::vector<double> out;
  std::vector<double> lse;
};
DenseOutput DenseReference(const AttentionCase& c, const AttentionData& d);

// Worst item of the comparison. out_rel: ‖o − o_ref‖₂ / ‖o_ref‖₂ per (row, head);
// lse_rel: |lse − lse_ref| / max(1, |lse_ref|). An item without keys (lse_ref = −inf) must be
// exactly lse = −inf and o = 0, else both errors are +inf.
struct AttentionError {
  double out_rel = 0;
  double lse_rel = 0;
};
AttentionError Compare(const AttentionOutput& got, const DenseOutput& want, int32_t head_dim);

}  // namespace tandem::testing
