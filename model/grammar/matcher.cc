#include "model/grammar/matcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "model/grammar/grammar_internal.h"
#include "model/grammar/string_view_util.h"

namespace tandem {
namespace grammar_internal {

// A suffix whose sets leave more uncertain tokens than this is looked at one frame deeper.
constexpr size_t kRefineAbove = 48;

class MatcherState {
 public:
  explicit MatcherState(const CompiledGrammarData& g) : g(g), stepper(g) {
    stepper.Expand(&pool, pool.Intern(0, 0, 0), &stacks);
  }
  MatcherState(const MatcherState& o)
      : g(o.g),
        pool(o.pool),
        stepper(o.g),
        stacks(o.stacks),
        compacted_at(o.compacted_at),
        memo(o.memo) {}

  // Walks `bytes` from `from`; false (and *out empty) when the grammar refuses them.
  bool Walk(const std::vector<int32_t>& from, std::string_view bytes, std::vector<int32_t>* out) {
    *out = from;
    for (const char c : bytes) {
      stepper.Step(&pool, *out, static_cast<uint8_t>(c), &scratch);
      out->swap(scratch);
      if (out->empty()) return false;
    }
    return true;
  }

  void MaybeCompact() {
    if (pool.size() > std::max<size_t>(size_t{1} << 15, 4 * compacted_at)) {
      pool.Compact(&stacks);
      compacted_at = pool.size();
    }
  }

  const PositionCache& CacheOf(int32_t n, int frames, const SuffixKey& key,
                               const PositionCache* shallower) {
    auto [it, inserted] = memo.try_emplace(key, nullptr);
    if (inserted) it->second = &g.Cache(pool, n, frames, key, shallower);
    return *it->second;
  }

  // The sets to use for stack `n`: one frame, or deeper while too many tokens stay uncertain.
  const PositionCache& SetsFor(int32_t n, SuffixKey* key_out) {
    int frames = 1;
    const PositionCache* shallower = nullptr;
    while (true) {
      const SuffixKey key = g.KeyOf(pool, n, frames);
      const PositionCache& c = CacheOf(n, frames, key, shallower);
      shallower = &c;
      if (c.uncertain.size() <= kRefineAbove || key.complete || key.n < frames ||
          frames == kMaxFrames) {
        *key_out = key;
        return c;
      }
      ++frames;
    }
  }

  const CompiledGrammarData& g;
  StackPool pool;
  Stepper stepper;
  std::vector<int32_t> stacks;  // sorted node ids
  size_t compacted_at = 0;
  std::vector<int32_t> scratch, walked;
  struct Group {
    SuffixKey key;
    int32_t node;
    const PositionCache* sets;
    bool operator<(const Group& o) const { return key < o.key || (key == o.key && node < o.node); }
  };
  std::vector<Group> groups;
  absl::flat_hash_map<SuffixKey, const PositionCache*> memo;
  std::vector<std::vector<int32_t>> levels;
};

namespace {

bool CacheAccepts(const PositionCache& c, int32_t token) {
  if (!c.accepted_bits.empty()) return (c.accepted_bits[token >> 6] >> (token & 63)) & 1;
  return std::binary_search(c.accepted_ids.begin(), c.accepted_ids.end(), token);
}

}  // namespace
}  // namespace grammar_internal

using grammar_internal::MatcherState;
using grammar_internal::PositionCache;
using grammar_internal::StackPool;

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), state_(std::make_unique<MatcherState>(grammar_->data())) {}

GrammarMatcher::GrammarMatcher(const GrammarMatcher& other)
    : grammar_(other.grammar_),
      state_(std::make_unique<MatcherState>(*other.state_)),
      tokens_accepted_(other.tokens_accepted_) {}

GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher& other) {
  if (this != &other) {
    grammar_ = other.grammar_;
    state_ = std::make_unique<MatcherState>(*other.state_);
    tokens_accepted_ = other.tokens_accepted_;
  }
  return *this;
}

GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;
GrammarMatcher::~GrammarMatcher() = default;

int32_t GrammarMatcher::vocab_size() const { return grammar_->vocab_size(); }

bool GrammarMatcher::IsAllowed(int32_t token) const {
  const auto& g = grammar_->data();
  const auto& v = g.vocab.data();
  if (token < 0 || token >= static_cast<int32_t>(v.bytes.size()) || v.never[token]) return false;
  MatcherState& s = *state_;
  const int32_t sorted_index = v.sorted_of[token];
  bool uncertain = false;
  for (const int32_t n : s.stacks) {
    if (n == 0) continue;
    grammar_internal::SuffixKey key;
    const PositionCache& c = s.SetsFor(n, &key);
    if (grammar_internal::CacheAccepts(c, token)) return true;
    if (!uncertain && std::binary_search(c.uncertain.begin(), c.uncertain.end(), sorted_index)) {
      uncertain = true;
    }
  }
  if (!uncertain) return false;
  const size_t mark = s.pool.size();
  const bool ok = s.Walk(s.stacks, v.bytes[token], &s.walked);
  s.pool.Truncate(mark);
  return ok;
}

absl::Status GrammarMatcher::AcceptBytes(std::string_view bytes) {
  MatcherState& s = *state_;
  const size_t mark = s.pool.size();
  if (!s.Walk(s.stacks, bytes, &s.walked)) {
    s.pool.Truncate(mark);
    return absl::InvalidArgumentError(absl::StrCat("grammar: the bytes \"",
                                                   absl::CEscape(grammar_internal::Av(bytes)),
                                                   "\" are not allowed here"));
  }
  s.stacks.swap(s.walked);
  s.MaybeCompact();
  return absl::OkStatus();
}

absl::Status GrammarMatcher::Accept(int32_t token) {
  const auto& v = grammar_->data().vocab.data();
  if (token < 0 || token >= static_cast<int32_t>(v.bytes.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: token ", token, " is outside the vocabulary"));
  }
  if (v.never[token]) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: token ", token, " is special (never allowed by a grammar)"));
  }
  MatcherState& s = *state_;
  const size_t mark = s.pool.size();
  if (!s.Walk(s.stacks, v.bytes[token], &s.walked)) {
    s.pool.Truncate(mark);
    return absl::InvalidArgumentError(absl::StrCat("grammar: token ", token, " (\"",
                                                   absl::CEscape(v.bytes[token]),
                                                   "\") is not allowed here"));
  }
  s.stacks.swap(s.walked);
  ++tokens_accepted_;
  s.MaybeCompact();
  return absl::OkStatus();
}

absl::Status GrammarMatcher::AcceptAll(absl::Span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    absl::Status st = Accept(tokens[i]);
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("replaying token ", i, " of ", tokens.size(), ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

void GrammarMatcher::FillAllowedMask(std::vector<uint64_t>* bits) const {
  const auto& g = grammar_->data();
  const auto& v = g.vocab.data();
  const size_t words = (v.bytes.size() + 63) / 64;
  bits->assign(words, 0);
  uint64_t* out = bits->data();
  MatcherState& s = *state_;
  s.groups.clear();
  for (const int32_t n : s.stacks) {
    if (n == 0) continue;
    MatcherState::Group grp;
    grp.node = n;
    grp.sets = &s.SetsFor(n, &grp.key);
    s.groups.push_back(grp);
  }
  std::sort(s.groups.begin(), s.groups.end());
  // Accepted sets first, so uncertain tokens already allowed are skipped below.
  for (size_t i = 0; i < s.groups.size(); ++i) {
    if (i > 0 && s.groups[i].key == s.groups[i - 1].key) continue;
    const PositionCache& c = *s.groups[i].sets;
    if (!c.accepted_bits.empty()) {
      const uint64_t* a = c.accepted_bits.data();
      for (size_t w = 0; w < words; ++w) out[w] |= a[w];
    } else {
      for (const int32_t t : c.accepted_ids) out[t >> 6] |= uint64_t{1} << (t & 63);
    }
  }
  const size_t mark = s.pool.size();
  if (s.levels.size() < v.max_len + 1) s.levels.resize(v.max_len + 1);
  for (size_t i = 0; i < s.groups.size();) {
    size_t j = i;
    std::vector<int32_t>& base = s.levels[0];
    base.clear();
    while (j < s.groups.size() && s.groups[j].key == s.groups[i].key) {
      base.push_back(s.groups[j].node);
      ++j;
    }
    const PositionCache& c = *s.groups[i].sets;
    i = j;
    std::string_view prev;
    size_t valid = 0;  // levels[0..valid] hold the sets after prev[0..k)
    for (const int32_t t : c.uncertain) {
      const int32_t id = v.sorted[t];
      if ((out[id >> 6] >> (id & 63)) & 1) continue;
      const std::string_view b = v.bytes[id];
      size_t k = 0;
      const size_t limit = std::min({valid, b.size(), prev.size()});
      while (k < limit && b[k] == prev[k]) ++k;
      while (k < b.size() && !s.levels[k].empty()) {
        s.stepper.Step(&s.pool, s.levels[k], static_cast<uint8_t>(b[k]), &s.levels[k + 1]);
        ++k;
      }
      prev = b;
      valid = k;
      if (k == b.size() && !s.levels[k].empty()) out[id >> 6] |= uint64_t{1} << (id & 63);
    }
  }
  s.pool.Truncate(mark);
}

std::string GrammarMatcher::DebugString() const {
  MatcherState& s = *state_;
  std::string out = absl::StrCat(s.stacks.size(), " stacks, pool ", s.pool.size(), "\n");
  for (const int32_t n : s.stacks) {
    if (n == 0) {
      out += "  (end)\n";
      continue;
    }
    const StackPool::Node& node = s.pool.node(n);
    grammar_internal::SuffixKey key;
    const PositionCache& c = s.SetsFor(n, &key);
    int depth = 0;
    for (int32_t p = n; p > 0; p = s.pool.node(p).parent) ++depth;
    const int32_t r = s.g.elem_rule[s.g.loc_elem[node.loc]];
    absl::StrAppend(&out, "  loc ", node.loc, " rule ", r, " counter ", node.counter, " depth ",
                    depth, ", sets of ", key.n, key.complete ? " (all)" : "", " frames: accepted ",
                    c.accepted_count, ", uncertain ", c.uncertain.size(), "\n");
  }
  return out;
}

bool GrammarMatcher::CanTerminate() const {
  return !state_->stacks.empty() && state_->stacks[0] == 0;
}

bool GrammarMatcher::IsTerminated() const {
  return state_->stacks.size() == 1 && state_->stacks[0] == 0;
}

}  // namespace tandem
