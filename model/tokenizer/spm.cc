#include "model/tokenizer/spm.h"

#include <queue>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem {
namespace {

// Length of the UTF-8 sequence a lead byte announces, as SentencePiece splits characters: a
// stray continuation byte counts as one character of its own.
size_t CharLength(uint8_t lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

}  // namespace

absl::StatusOr<SpmMerger> SpmMerger::Create(absl::Span<const std::string> tokens,
                                            absl::Span<const float> scores, int32_t unk_id) {
  if (scores.size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat("SentencePiece vocabulary has ", tokens.size(),
                                                   " tokens but ", scores.size(), " scores"));
  }
  SpmMerger m;
  m.ids_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    m.ids_.insert_or_assign(tokens[i], static_cast<int32_t>(i));
  }
  m.scores_.assign(scores.begin(), scores.end());
  for (int b = 0; b < 256; ++b) {
    int32_t id = m.Find(absl::StrFormat("<0x%02X>", b));
    if (id < 0) id = m.Find(std::string(1, static_cast<char>(b)));
    m.byte_tokens_[b] = id >= 0 ? id : unk_id;
  }
  return m;
}

int32_t SpmMerger::Find(absl::string_view text) const {
  const auto it = ids_.find(text);
  return it == ids_.end() ? -1 : it->second;
}

void SpmMerger::Encode(absl::string_view piece, std::vector<int32_t>* out) const {
  struct Symbol {
    size_t begin, len;  // bytes of piece; len 0 = merged into its left neighbour
    int prev, next;     // -1 at the ends
  };
  std::vector<Symbol> sym;
  for (size_t at = 0; at < piece.size();) {
    const size_t len = std::min(CharLength(static_cast<uint8_t>(piece[at])), piece.size() - at);
    const int i = static_cast<int>(sym.size());
    if (i > 0) sym.back().next = i;
    sym.push_back({at, len, i - 1, -1});
    at += len;
  }
  if (sym.empty()) return;
  struct Candidate {
    float score;
    int left, right;
    size_t len;  // bytes of the pair when it was considered
    bool operator<(const Candidate& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Candidate> heap;
  auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t len = sym[left].len + sym[right].len;
    const int32_t id = Find(piece.substr(sym[left].begin, len));
    if (id >= 0) heap.push({scores_[id], left, right, len});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) consider(i, i + 1);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& l = sym[c.left];
    Symbol& r = sym[c.right];
    // Symbols only grow rightwards into their neighbour, so unchanged lengths mean an
    // unchanged pair.
    if (l.len == 0 || r.len == 0 || l.len + r.len != c.len) continue;
    l.len = c.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }
  for (int i = 0; i >= 0; i = sym[i].next) {
    const absl::string_view text = piece.substr(sym[i].begin, sym[i].len);
    if (const int32_t id = Find(text); id >= 0) {
      out->push_back(id);
      continue;
    }
    for (const char c : text) {
      const int32_t id = byte_tokens_[static_cast<uint8_t>(c)];
      if (id >= 0) out->push_back(id);
    }
  }
}

}  // namespace tandem
