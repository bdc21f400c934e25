#include "attention/pcp_partition.h"

#include <algorithm>

namespace tandem {

int64_t PcpPartition::max_rows_per_rank() const {
  int64_t m = 0;
  for (const auto& g : gather) m = std::max<int64_t>(m, static_cast<int64_t>(g.size()));
  return m;
}

std::vector<int64_t> PcpPartition::RestoreIndex(int64_t stride) const {
  std::vector<int64_t> out(owner_rank.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = owner_rank[i] * stride + row_in_rank[i];
  return out;
}

PcpPartition PartitionForPcp(absl::Span<const int64_t> lengths, int32_t pcp) {
  PcpPartition p;
  p.pcp = pcp;
  p.gather.resize(pcp);
  int64_t total = 0;
  for (int64_t q : lengths) total += q;
  p.owner_rank.resize(total);
  p.row_in_rank.resize(total);

  int64_t request_start = 0;
  const int64_t num_chunks = 2 * static_cast<int64_t>(pcp);
  for (int64_t q : lengths) {
    const int64_t chunk = (q + num_chunks - 1) / num_chunks;
    for (int32_t c = 0; c < pcp; ++c) {
      for (int64_t k : {static_cast<int64_t>(c), num_chunks - 1 - c}) {
        const int64_t begin = std::min(q, k * chunk);
        const int64_t end = std::min(q, (k + 1) * chunk);
        for (int64_t tok = begin; tok < end; ++tok) {
          const int64_t row = request_start + tok;
          p.owner_rank[row] = c;
          p.row_in_rank[row] = static_cast<int64_t>(p.gather[c].size());
          p.gather[c].push_back(row);
        }
      }
    }
    request_start += q;
  }
  return p;
}

}  // namespace tandem
