#include "model/grammar/vocabulary.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/grammar/grammar_internal.h"

namespace tandem {
namespace grammar_internal {

void BuildTrie(VocabData* d) {
  const int32_t n = static_cast<int32_t>(d->bytes.size());
  d->sorted.clear();
  d->sorted_of.assign(n, -1);
  d->max_len = 0;
  for (int32_t id = 0; id < n; ++id) {
    if (d->bytes[id].empty()) d->never[id] = 1;
    if (!d->never[id]) d->sorted.push_back(id);
    d->max_len = std::max(d->max_len, d->bytes[id].size());
  }
  std::stable_sort(d->sorted.begin(), d->sorted.end(),
                   [d](int32_t a, int32_t b) { return d->bytes[a] < d->bytes[b]; });
  for (size_t i = 0; i < d->sorted.size(); ++i)
    d->sorted_of[d->sorted[i]] = static_cast<int32_t>(i);

  d->trie.clear();
  d->trie.push_back(TrieNode{});  // root
  std::vector<int32_t> path{0};   // path[k] = node at depth k
  std::string_view prev;
  auto close = [d](int32_t node, int32_t token_index) {
    d->trie[node].end = static_cast<uint32_t>(d->trie.size());
    d->trie[node].tok_hi = token_index;
  };
  for (size_t i = 0; i < d->sorted.size(); ++i) {
    const std::string_view b = d->bytes[d->sorted[i]];
    size_t lcp = 0;
    while (lcp < b.size() && lcp < prev.size() && b[lcp] == prev[lcp]) ++lcp;
    while (path.size() > lcp + 1) {
      close(path.back(), static_cast<int32_t>(i));
      path.pop_back();
    }
    for (size_t k = lcp; k < b.size(); ++k) {
      TrieNode node;
      node.byte = static_cast<uint8_t>(b[k]);
      node.depth = static_cast<uint16_t>(std::min<size_t>(k + 1, 65535));
      node.tok_lo = static_cast<int32_t>(i);
      node.here_hi = static_cast<int32_t>(i);
      path.push_back(static_cast<int32_t>(d->trie.size()));
      d->trie.push_back(node);
    }
    // This token ends at path.back() (a duplicate byte string ends at the same node).
    d->trie[path.back()].here_hi = static_cast<int32_t>(i) + 1;
    prev = b;
  }
  while (!path.empty()) {
    close(path.back(), static_cast<int32_t>(d->sorted.size()));
    path.pop_back();
  }
}

}  // namespace grammar_internal

Vocabulary Vocabulary::FromTokenizer(const Tokenizer& tokenizer,
                                     absl::Span<const int32_t> allow_special_as_text) {
  auto d = std::make_shared<grammar_internal::VocabData>();
  const int32_t n = tokenizer.vocab_size();
  d->bytes.resize(n);
  d->never.assign(n, 0);
  for (int32_t id = 0; id < n; ++id) {
    d->bytes[id] = std::string(tokenizer.TokenBytes(id));
    const TokenKind kind = tokenizer.Kind(id);
    if (kind == TokenKind::kControl || kind == TokenKind::kUnknown || kind == TokenKind::kUnused) {
      d->never[id] = 1;
    }
  }
  for (const int32_t id : allow_special_as_text) {
    if (id >= 0 && id < n && tokenizer.Kind(id) == TokenKind::kControl) d->never[id] = 0;
  }
  grammar_internal::BuildTrie(d.get());
  return Vocabulary(std::move(d));
}

absl::StatusOr<Vocabulary> Vocabulary::FromTokenBytes(std::vector<std::string> bytes,
                                                      std::vector<bool> never_allowed) {
  if (bytes.empty()) return absl::InvalidArgumentError("vocabulary: no tokens");
  if (!never_allowed.empty() && never_allowed.size() != bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("vocabulary: ", bytes.size(), " tokens but ",
                                                   never_allowed.size(), " never_allowed flags"));
  }
  auto d = std::make_shared<grammar_internal::VocabData>();
  d->never.assign(bytes.size(), 0);
  for (size_t i = 0; i < never_allowed.size(); ++i) d->never[i] = never_allowed[i] ? 1 : 0;
  d->bytes = std::move(bytes);
  grammar_internal::BuildTrie(d.get());
  return Vocabulary(std::move(d));
}

int32_t Vocabulary::size() const { return static_cast<int32_t>(data_->bytes.size()); }

std::string_view Vocabulary::TokenBytes(int32_t id) const {
  if (id < 0 || id >= size()) return {};
  return data_->bytes[id];
}

bool Vocabulary::IsNeverAllowed(int32_t id) const {
  if (id < 0 || id >= size()) return true;
  return data_->never[id] != 0;
}

size_t Vocabulary::max_token_bytes() const { return data_->max_len; }

}  // namespace tandem
