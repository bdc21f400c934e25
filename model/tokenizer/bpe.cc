#include "model/tokenizer/bpe.h"

#include <queue>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/utf8.h"

namespace tandem {

absl::StatusOr<BpeMerger> BpeMerger::Create(
    const absl::flat_hash_map<std::string, int32_t>& vocab,
    absl::Span<const std::pair<std::string, std::string>> merges, bool ignore_merges) {
  BpeMerger m;
  if (ignore_merges) {
    m.whole_.reserve(vocab.size());
    std::string bytes;
    for (const auto& [text, id] : vocab) {
      if (ByteLevelToBytes(text, &bytes)) m.whole_.try_emplace(bytes, id);
    }
  }
  for (int b = 0; b < 256; ++b) {
    std::string text;
    AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &text);
    const auto it = vocab.find(text);
    m.byte_tokens_[b] = it == vocab.end() ? -1 : it->second;
  }
  m.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto l = vocab.find(left), r = vocab.find(right), lr = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || lr == vocab.end()) {
      return absl::InvalidArgumentError(absl::StrCat("BPE merge #", rank, " '", left, " ", right,
                                                     "' uses a token missing from the vocabulary"));
    }
    // A repeated pair keeps its first (best) rank, as HF does.
    m.merges_.try_emplace(Key(l->second, r->second), Merge{static_cast<int32_t>(rank), lr->second});
  }
  return m;
}

void BpeMerger::Encode(absl::string_view piece, std::vector<int32_t>* out) const {
  if (!whole_.empty()) {
    if (const auto it = whole_.find(piece); it != whole_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int prev, next;  // -1 at the ends
  };
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  for (const char c : piece) {
    const int32_t id = byte_tokens_[static_cast<uint8_t>(c)];
    if (id < 0) continue;  // no token for this byte: dropped, its neighbours become adjacent
    const int i = static_cast<int>(sym.size());
    if (i > 0) sym.back().next = i;
    sym.push_back({id, i - 1, -1});
  }
  const int n = static_cast<int>(sym.size());
  if (n == 0) return;
  struct Candidate {
    int32_t rank;
    int left, right;
    int32_t left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int left) {
    if (left < 0) return;
    const int right = sym[left].next;
    if (right < 0) return;
    const auto it = merges_.find(Key(sym[left].id, sym[right].id));
    if (it != merges_.end()) {
      heap.push({it->second.rank, left, right, sym[left].id, sym[right].id});
    }
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // Symbols only ever grow, so an unchanged (position, id) pair is still the same pair.
    if (sym[c.left].id != c.left_id || sym[c.left].next != c.right ||
        sym[c.right].id != c.right_id) {
      continue;
    }
    sym[c.left].id = merges_.find(Key(c.left_id, c.right_id))->second.merged;
    const int after = sym[c.right].next;
    sym[c.left].next = after;
    if (after >= 0) sym[after].prev = c.left;
    sym[c.right].id = -1;  // dead
    consider(sym[c.left].prev);
    consider(c.left);
  }
  for (int i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

}  // namespace tandem
