#include "model/grammar/compiled_grammar.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/grammar/grammar_internal.h"

namespace tandem {
namespace grammar_internal {
namespace {

// ---- Inlining --------------------------------------------------------------------------------
// A small rule that is not recursive is copied into the alternatives that reference it, so the
// frame of a position spans what follows it (a JSON string's character rule inlined into the
// repetition that reads characters keeps "any character" tokens context-independent).

constexpr size_t kInlineMaxElements = 48;
constexpr size_t kInlineMaxAlternatives = 16;
constexpr size_t kInlinedRuleMaxAlternatives = 96;
constexpr size_t kInlinedRuleMaxElements = 2048;

size_t RuleSize(const GbnfRule& r) {
  size_t n = 0;
  for (const GbnfSequence& s : r.alternatives) n += s.size() + 1;
  return n;
}

void InlineSmallRules(GbnfGrammar* g) {
  const size_t n = g->rules.size();
  // Recursive rules: in a cycle of the reference graph (Tarjan's SCC, iterative).
  std::vector<std::vector<int32_t>> succ(n);
  for (size_t r = 0; r < n; ++r) {
    for (const GbnfSequence& s : g->rules[r].alternatives) {
      for (const GbnfElement& e : s) {
        if (e.kind == GbnfElement::Kind::kRuleRef) succ[r].push_back(e.rule);
      }
    }
  }
  std::vector<int32_t> index(n, -1), low(n, 0), comp(n, -1), comp_size;
  std::vector<bool> on_stack(n, false);
  std::vector<int32_t> stack, order;  // order: rules in SCC completion order (callees first)
  int32_t counter = 0;
  for (size_t s = 0; s < n; ++s) {
    if (index[s] >= 0) continue;
    std::vector<std::pair<int32_t, size_t>> call{{static_cast<int32_t>(s), 0}};
    index[s] = low[s] = counter++;
    stack.push_back(static_cast<int32_t>(s));
    on_stack[s] = true;
    while (!call.empty()) {
      auto& [v, next] = call.back();
      if (next < succ[v].size()) {
        const int32_t w = succ[v][next++];
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          stack.push_back(w);
          on_stack[w] = true;
          call.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
      } else {
        const int32_t vv = v;
        call.pop_back();
        if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[vv]);
        if (low[vv] == index[vv]) {
          const int32_t c = static_cast<int32_t>(comp_size.size());
          comp_size.push_back(0);
          while (true) {
            const int32_t w = stack.back();
            stack.pop_back();
            on_stack[w] = false;
            comp[w] = c;
            ++comp_size[c];
            order.push_back(w);
            if (w == vv) break;
          }
        }
      }
    }
  }
  std::vector<bool> recursive(n, false);
  for (size_t r = 0; r < n; ++r) {
    if (comp_size[comp[r]] > 1) recursive[r] = true;
    for (int32_t w : succ[r]) {
      if (w == static_cast<int32_t>(r)) recursive[r] = true;
    }
  }
  auto inlinable = [&](int32_t r) {
    return r != g->root && !recursive[r] && !g->rules[r].repeat &&
           g->rules[r].alternatives.size() <= kInlineMaxAlternatives &&
           RuleSize(g->rules[r]) <= kInlineMaxElements;
  };
  // Callees complete their SCC first, so `order` visits a rule after the rules it references.
  for (const int32_t q : order) {
    GbnfRule& rule = g->rules[q];
    bool changed = true;
    while (changed) {
      changed = false;
      std::vector<GbnfSequence> out;
      for (size_t a = 0; a < rule.alternatives.size(); ++a) {
        const GbnfSequence& seq = rule.alternatives[a];
        size_t at = seq.size();
        for (size_t i = 0; i < seq.size(); ++i) {
          // A rule of several alternatives only at the start: copies of a shared prefix would
          // all stay alive while it is read (a pattern's date digits read by 96 stacks).
          if (seq[i].kind == GbnfElement::Kind::kRuleRef && seq[i].rule != q &&
              inlinable(seq[i].rule) &&
              (i == 0 || g->rules[seq[i].rule].alternatives.size() == 1)) {
            at = i;
            break;
          }
        }
        if (at == seq.size()) {
          out.push_back(seq);
          continue;
        }
        const GbnfRule& callee = g->rules[seq[at].rule];
        size_t total = 0;
        for (const GbnfSequence& s : out) total += s.size() + 1;
        for (size_t b = a; b < rule.alternatives.size(); ++b) {
          total += rule.alternatives[b].size() + 1;
        }
        const size_t grow = callee.alternatives.size() * (seq.size() + 1) + RuleSize(callee);
        if (out.size() + rule.alternatives.size() - a + callee.alternatives.size() >
                kInlinedRuleMaxAlternatives ||
            total + grow > kInlinedRuleMaxElements) {
          out.push_back(seq);
          continue;
        }
        for (const GbnfSequence& body : callee.alternatives) {
          GbnfSequence s(seq.begin(), seq.begin() + at);
          s.insert(s.end(), body.begin(), body.end());
          s.insert(s.end(), seq.begin() + at + 1, seq.end());
          out.push_back(std::move(s));
        }
        changed = true;
      }
      rule.alternatives = std::move(out);
    }
  }
}

// ---- Code point classes as UTF-8 byte DFAs ------------------------------------------------------

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive, sorted, disjoint

Ranges Normalize(const GbnfElement& e) {
  Ranges r;
  for (const GbnfCharRange& x : e.ranges) r.emplace_back(x.lo, std::min<uint32_t>(x.hi, 0x10FFFF));
  std::sort(r.begin(), r.end());
  Ranges merged;
  for (const auto& x : r) {
    if (x.first > x.second) continue;
    if (!merged.empty() && x.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, x.second);
    } else {
      merged.push_back(x);
    }
  }
  if (e.negated) {
    Ranges comp;
    uint32_t next = 0;
    for (const auto& x : merged) {
      if (x.first > next) comp.emplace_back(next, x.first - 1);
      next = x.second + 1;
    }
    if (next <= 0x10FFFF) comp.emplace_back(next, 0x10FFFF);
    merged = std::move(comp);
  }
  // Remove surrogates.
  Ranges out;
  for (const auto& x : merged) {
    if (x.second < 0xD800 || x.first > 0xDFFF) {
      out.push_back(x);
      continue;
    }
    if (x.first < 0xD800) out.emplace_back(x.first, 0xD7FF);
    if (x.second > 0xDFFF) out.emplace_back(0xE000, x.second);
  }
  return out;
}

int Utf8Len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void Encode(uint32_t cp, uint8_t* b) {
  switch (Utf8Len(cp)) {
    case 1:
      b[0] = static_cast<uint8_t>(cp);
      break;
    case 2:
      b[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      b[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    case 3:
      b[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    default:
      b[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
      b[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
      b[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      b[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  }
}

struct ByteSeq {
  int len = 0;
  uint8_t lo[4], hi[4];
};

// Splits [lo, hi] (one encoded length, no surrogates) into sequences of byte ranges.
void SplitRange(uint32_t lo, uint32_t hi, std::vector<ByteSeq>* out) {
  static constexpr uint32_t kBounds[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t b : kBounds) {
    if (lo <= b && hi > b) {
      SplitRange(lo, b, out);
      SplitRange(b + 1, hi, out);
      return;
    }
  }
  const int n = Utf8Len(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitRange(lo, lo | m, out);
        SplitRange((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitRange(lo, (hi & ~m) - 1, out);
        SplitRange(hi & ~m, hi, out);
        return;
      }
    }
  }
  ByteSeq s;
  s.len = n;
  Encode(lo, s.lo);
  Encode(hi, s.hi);
  out->push_back(s);
}

ByteClass BuildByteClass(const Ranges& ranges) {
  std::vector<ByteSeq> seqs;
  for (const auto& r : ranges) SplitRange(r.first, r.second, &seqs);
  ByteClass c;
  // DFA states: sets of (sequence, offset) pairs, found breadth first.
  using State = std::vector<std::pair<int32_t, int32_t>>;
  std::map<State, int32_t> ids;
  std::vector<State> states;
  State start;
  for (size_t i = 0; i < seqs.size(); ++i) start.emplace_back(static_cast<int32_t>(i), 0);
  ids[start] = 0;
  states.push_back(start);
  for (size_t s = 0; s < states.size(); ++s) {
    c.trans.resize((s + 1) * 256, ByteClass::kReject);
    for (int b = 0; b < 256; ++b) {
      State next;
      bool accept = false;
      for (const auto& [q, off] : states[s]) {
        const ByteSeq& seq = seqs[q];
        if (b < seq.lo[off] || b > seq.hi[off]) continue;
        if (off + 1 == seq.len) {
          accept = true;
        } else {
          next.emplace_back(q, off + 1);
        }
      }
      // UTF-8 is prefix-free: a byte cannot both end a character and continue another.
      if (accept) {
        c.trans[s * 256 + b] = ByteClass::kAccept;
      } else if (!next.empty()) {
        auto [it, inserted] = ids.try_emplace(next, static_cast<int32_t>(states.size()));
        if (inserted) states.push_back(next);
        c.trans[s * 256 + b] = static_cast<int16_t>(it->second);
      }
    }
  }
  c.num_states = static_cast<int32_t>(states.size());
  return c;
}

// ---- Lowering ----------------------------------------------------------------------------------

void Lower(const GbnfGrammar& g, CompiledGrammarData* d) {
  std::map<Ranges, int32_t> class_ids;
  std::vector<int32_t> rule_map(g.rules.size(), -1);
  std::vector<int32_t> todo;
  auto rule_id = [&](int32_t r) {
    if (rule_map[r] < 0) {
      rule_map[r] = static_cast<int32_t>(d->alts.size());
      d->alts.emplace_back();
      const GbnfRule& rule = g.rules[r];
      d->rule_repeat.push_back(rule.repeat ? 1 : 0);
      d->rule_min.push_back(rule.repeat ? rule.repeat_min : 0);
      d->rule_max.push_back(rule.repeat ? rule.repeat_max : 0);
      todo.push_back(r);
    }
    return rule_map[r];
  };
  d->elems.push_back(Elem{ElemKind::kRef, rule_id(g.root)});
  d->elems.push_back(Elem{ElemKind::kEnd, -1});
  d->elem_rule.assign(2, -1);
  for (size_t t = 0; t < todo.size(); ++t) {
    const int32_t r = todo[t];
    const int32_t lr = rule_map[r];
    for (const GbnfSequence& seq : g.rules[r].alternatives) {
      d->alts[lr].push_back(static_cast<int32_t>(d->elems.size()));
      for (const GbnfElement& e : seq) {
        if (e.kind == GbnfElement::Kind::kRuleRef) {
          const int32_t target = rule_id(e.rule);
          d->elems.push_back(Elem{ElemKind::kRef, target});
        } else {
          Ranges ranges = Normalize(e);
          auto [it, inserted] =
              class_ids.try_emplace(ranges, static_cast<int32_t>(d->classes.size()));
          if (inserted) d->classes.push_back(BuildByteClass(ranges));
          d->elems.push_back(Elem{ElemKind::kClass, it->second});
        }
        d->elem_rule.push_back(lr);
      }
      d->elems.push_back(Elem{g.rules[r].repeat ? ElemKind::kLoop : ElemKind::kEnd, -1});
      d->elem_rule.push_back(lr);
    }
  }
  // Nullable rules, and repetition rules whose round may be empty.
  const size_t nr = d->alts.size();
  std::vector<uint8_t> nullable(nr, 0);
  d->rule_body_nullable.assign(nr, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < nr; ++r) {
      if (nullable[r] && (!d->rule_repeat[r] || d->rule_body_nullable[r])) continue;
      bool body = false;
      for (int32_t a : d->alts[r]) {
        bool all = true;
        for (int32_t e = a;
             d->elems[e].kind == ElemKind::kRef || d->elems[e].kind == ElemKind::kClass; ++e) {
          if (d->elems[e].kind == ElemKind::kClass || !nullable[d->elems[e].arg]) {
            all = false;
            break;
          }
        }
        body = body || all;
      }
      const bool now = body || (d->rule_repeat[r] && d->rule_min[r] == 0);
      if (now && !nullable[r]) {
        nullable[r] = 1;
        changed = true;
      }
      if (d->rule_repeat[r] && body && !d->rule_body_nullable[r]) {
        d->rule_body_nullable[r] = 1;
        changed = true;
      }
    }
  }
  // Locations.
  const int32_t ne = static_cast<int32_t>(d->elems.size());
  d->loc_elem.resize(ne);
  d->loc_state.assign(ne, 0);
  d->extra_loc_base.assign(ne, -1);
  for (int32_t e = 0; e < ne; ++e) d->loc_elem[e] = e;
  for (int32_t e = 0; e < ne; ++e) {
    if (d->elems[e].kind != ElemKind::kClass) continue;
    const ByteClass& c = d->classes[d->elems[e].arg];
    d->extra_loc_base[e] = static_cast<int32_t>(d->loc_elem.size());
    for (int32_t s = 1; s < c.num_states; ++s) {
      d->loc_elem.push_back(e);
      d->loc_state.push_back(s);
    }
  }
}

// ---- Per-position token sets -------------------------------------------------------------------
// A lazily built DFA over frame-local stack sets (node 0 = "left the frame"), with byte
// equivalence classes, so walking the trie costs a table look-up per node.

class FrameDfa {
 public:
  FrameDfa(const CompiledGrammarData& g, StackPool* pool) : g_(g), pool_(pool), stepper_(g) {
    // Byte classes: bytes every class DFA state treats alike.
    absl::flat_hash_map<std::vector<int16_t>, int32_t> sig_ids;
    std::vector<int16_t> sig;
    for (int b = 0; b < 256; ++b) {
      sig.clear();
      for (const ByteClass& c : g.classes) {
        for (int32_t s = 0; s < c.num_states; ++s) sig.push_back(c.trans[s * 256 + b]);
      }
      auto [it, inserted] = sig_ids.try_emplace(sig, static_cast<int32_t>(sig_ids.size()));
      byte_class_[b] = it->second;
      if (inserted) representative_.push_back(static_cast<uint8_t>(b));
    }
    num_byte_classes_ = static_cast<int32_t>(representative_.size());
    // Bytes each class state does not refuse.
    live_base_.resize(g.classes.size());
    for (size_t c = 0; c < g.classes.size(); ++c) {
      live_base_[c] = static_cast<int32_t>(class_live_.size());
      for (int32_t s = 0; s < g.classes[c].num_states; ++s) {
        std::array<uint64_t, 4> m{};
        for (int b = 0; b < 256; ++b) {
          if (g.classes[c].trans[s * 256 + b] != ByteClass::kReject)
            m[b >> 6] |= uint64_t{1} << (b & 63);
        }
        class_live_.push_back(m);
      }
    }
    Intern({});  // 0: dead
  }

  int32_t Start(const std::vector<std::pair<int32_t, int32_t>>& frames) {
    int32_t node = 0;
    for (size_t i = frames.size(); i-- > 0;) {
      node = pool_->Intern(frames[i].first, frames[i].second, node);
    }
    std::vector<int32_t> set{node};
    return Intern(std::move(set));
  }

  int32_t Next(int32_t state, uint8_t byte) {
    if (!((live_[state][byte >> 6] >> (byte & 63)) & 1)) return 0;
    const int32_t bc = byte_class_[byte];
    const int32_t known = trans_[static_cast<size_t>(state) * num_byte_classes_ + bc];
    if (known >= 0) return known;
    std::vector<int32_t> out;
    stepper_.Step(pool_, sets_[state], representative_[bc], &out);
    const int32_t next = Intern(std::move(out));
    trans_[static_cast<size_t>(state) * num_byte_classes_ + bc] = next;
    return next;
  }

  bool HasExit(int32_t state) const { return has_exit_[state] != 0; }
  size_t num_states() const { return sets_.size(); }

 private:
  int32_t Intern(std::vector<int32_t> set) {
    auto [it, inserted] = ids_.try_emplace(set, static_cast<int32_t>(sets_.size()));
    if (inserted) {
      has_exit_.push_back(!set.empty() && set[0] == 0);
      std::array<uint64_t, 4> live{};
      for (const int32_t n : set) {
        if (n == 0) continue;
        const StackPool::Node& node = pool_->node(n);
        const int32_t e = g_.loc_elem[node.loc];
        const std::array<uint64_t, 4>& m =
            class_live_[live_base_[g_.elems[e].arg] + g_.loc_state[node.loc]];
        for (int w = 0; w < 4; ++w) live[w] |= m[w];
      }
      live_.push_back(live);
      sets_.push_back(std::move(set));
      trans_.resize(sets_.size() * num_byte_classes_, -1);
    }
    return it->second;
  }

  const CompiledGrammarData& g_;
  StackPool* pool_;
  Stepper stepper_;
  std::vector<int32_t> live_base_;                   // class -> first index in class_live_
  std::vector<std::array<uint64_t, 4>> class_live_;  // class state -> bytes not refused
  std::vector<std::array<uint64_t, 4>> live_;        // DFA state -> bytes some stack takes
  int32_t byte_class_[256];
  std::vector<uint8_t> representative_;
  int32_t num_byte_classes_ = 0;
  absl::flat_hash_map<std::vector<int32_t>, int32_t> ids_;
  std::vector<std::vector<int32_t>> sets_;
  std::vector<uint8_t> has_exit_;
  std::vector<int32_t> trans_;
};

}  // namespace

struct FrameWalker::Impl {
  explicit Impl(const CompiledGrammarData& g) : g(g), dfa(g, &pool) {}
  const CompiledGrammarData& g;
  StackPool pool;
  FrameDfa dfa;
  std::vector<int32_t> state, accepted;
  std::vector<uint8_t> exit_before;
};

FrameWalker::FrameWalker(const CompiledGrammarData& g) : impl_(std::make_unique<Impl>(g)) {}
FrameWalker::~FrameWalker() = default;
size_t FrameWalker::num_states() const { return impl_->dfa.num_states(); }

PositionCache FrameWalker::Walk(const std::vector<std::pair<int32_t, int32_t>>& frames,
                                bool complete) {
  Impl& w = *impl_;
  const VocabData& v = w.g.vocab.data();
  w.state.resize(v.max_len + 2);
  w.exit_before.resize(v.max_len + 2);
  w.accepted.clear();
  PositionCache cache;
  w.state[0] = w.dfa.Start(frames);
  w.exit_before[0] = 0;
  const std::vector<TrieNode>& trie = v.trie;
  size_t i = 1;
  while (i < trie.size()) {
    const TrieNode& node = trie[i];
    const int k = node.depth;
    const int32_t prev = w.state[k - 1];
    // A token is uncertain when, with bytes left, some path left the frame.
    // (With the whole stack, leaving it with bytes left is a rejection.)
    const bool exited = !complete && (w.exit_before[k - 1] || w.dfa.HasExit(prev));
    const int32_t s = w.dfa.Next(prev, node.byte);
    if (s == 0) {
      if (exited) {
        for (int32_t t = node.tok_lo; t < node.tok_hi; ++t) cache.uncertain.push_back(t);
      }
      i = node.end;
      continue;
    }
    w.state[k] = s;
    w.exit_before[k] = exited;
    for (int32_t t = node.tok_lo; t < node.here_hi; ++t) w.accepted.push_back(t);
    ++i;
  }
  SetAccepted(v, w.accepted, &cache);
  return cache;
}

void FrameWalker::SetAccepted(const VocabData& v, const std::vector<int32_t>& sorted_indices,
                              PositionCache* cache) {
  const size_t vocab = v.bytes.size();
  cache->accepted_count = static_cast<int32_t>(sorted_indices.size());
  cache->accepted_bits.clear();
  cache->accepted_ids.clear();
  if (sorted_indices.size() * 32 > vocab) {
    cache->accepted_bits.assign((vocab + 63) / 64, 0);
    for (int32_t t : sorted_indices) {
      const int32_t id = v.sorted[t];
      cache->accepted_bits[id >> 6] |= uint64_t{1} << (id & 63);
    }
  } else {
    cache->accepted_ids.reserve(sorted_indices.size());
    for (int32_t t : sorted_indices) cache->accepted_ids.push_back(v.sorted[t]);
    std::sort(cache->accepted_ids.begin(), cache->accepted_ids.end());
  }
}

PositionCache FrameWalker::Refine(const std::vector<std::pair<int32_t, int32_t>>& frames,
                                  bool complete, const PositionCache& shallower) {
  Impl& w = *impl_;
  const VocabData& v = w.g.vocab.data();
  w.state.resize(v.max_len + 2);
  w.exit_before.resize(v.max_len + 2);
  // The shallower accepted set, as sorted indices, plus what this walk settles.
  w.accepted.clear();
  if (!shallower.accepted_bits.empty()) {
    for (size_t word = 0; word < shallower.accepted_bits.size(); ++word) {
      for (uint64_t bits = shallower.accepted_bits[word]; bits != 0; bits &= bits - 1) {
        const int32_t id = static_cast<int32_t>(word * 64 + __builtin_ctzll(bits));
        w.accepted.push_back(v.sorted_of[id]);
      }
    }
  } else {
    for (int32_t id : shallower.accepted_ids) w.accepted.push_back(v.sorted_of[id]);
  }
  PositionCache cache;
  w.state[0] = w.dfa.Start(frames);
  w.exit_before[0] = 0;
  std::string_view prev;
  size_t valid = 0;  // state[0..valid] hold the walk of prev[0..k)
  for (const int32_t t : shallower.uncertain) {
    const std::string_view b = v.bytes[v.sorted[t]];
    size_t k = 0;
    const size_t limit = std::min({valid, b.size(), prev.size()});
    while (k < limit && b[k] == prev[k]) ++k;
    bool exited = k > 0 && w.exit_before[k];
    while (k < b.size() && w.state[k] != 0) {
      exited = !complete && (w.exit_before[k] || w.dfa.HasExit(w.state[k]));
      w.state[k + 1] = w.dfa.Next(w.state[k], static_cast<uint8_t>(b[k]));
      w.exit_before[k + 1] = exited;
      ++k;
    }
    prev = b;
    valid = k;
    if (k == b.size() && w.state[k] != 0) {
      w.accepted.push_back(t);
    } else if (w.exit_before[k]) {
      cache.uncertain.push_back(t);
    }
  }
  SetAccepted(v, w.accepted, &cache);
  return cache;
}

CompiledGrammarData::~CompiledGrammarData() = default;

uint64_t CompiledGrammarData::FrameKey(int32_t loc, int32_t counter) const {
  const int32_t r = elem_rule[loc_elem[loc]];
  uint64_t rmin = 0, rmax = 0;
  if (r >= 0 && rule_repeat[r]) {
    const int32_t min = rule_min[r], max = rule_max[r];
    if (rule_body_nullable[r]) {
      rmin = static_cast<uint64_t>(std::max(min - counter, 0));
      rmax = max < 0 ? 0xFFFF : static_cast<uint64_t>(max - counter);
    } else {
      // A round takes a byte at least, so a token ends fewer than counter_cap rounds.
      rmin = static_cast<uint64_t>(std::clamp(min - counter, 0, counter_cap));
      rmax = max < 0 ? static_cast<uint64_t>(counter_cap)
                     : static_cast<uint64_t>(std::min(max - counter, counter_cap));
    }
  }
  return (static_cast<uint64_t>(static_cast<uint32_t>(loc)) << 32) | (rmin << 16) | rmax;
}

SuffixKey CompiledGrammarData::KeyOf(const StackPool& pool, int32_t node, int frames) const {
  SuffixKey key;
  int32_t n = node;
  while (key.n < frames && n != 0) {
    const StackPool::Node& x = pool.node(n);
    key.k[key.n++] = FrameKey(x.loc, x.counter);
    n = x.parent;
  }
  // One frame is never "the whole stack": the compiler's one-frame sets serve every stack; a
  // deeper key tells when it reached the bottom.
  key.complete = n == 0 && frames > 1;
  return key;
}

const PositionCache& CompiledGrammarData::Cache(const StackPool& pool, int32_t node, int frames,
                                                const SuffixKey& key,
                                                const PositionCache* shallower) const {
  absl::MutexLock lock(&mu);
  auto it = cache_index.find(key);
  if (it != cache_index.end()) return *it->second;
  std::vector<std::pair<int32_t, int32_t>> chain;
  for (int32_t n = node; n != 0 && static_cast<int>(chain.size()) < frames;
       n = pool.node(n).parent) {
    chain.emplace_back(pool.node(n).loc, pool.node(n).counter);
  }
  // The walker's frame DFA only grows; start it again when it got large.
  if (walker == nullptr || walker->num_states() > 200000)
    walker = std::make_unique<FrameWalker>(*this);
  caches.push_back(shallower != nullptr ? walker->Refine(chain, key.complete, *shallower)
                                        : walker->Walk(chain, key.complete));
  cache_index.emplace(key, &caches.back());
  return caches.back();
}

namespace {

void BuildCaches(CompiledGrammarData* d) {
  const int32_t nloc = static_cast<int32_t>(d->loc_elem.size());
  StackPool pool;
  for (int32_t loc = 0; loc < nloc; ++loc) {
    if (d->elems[d->loc_elem[loc]].kind != ElemKind::kClass) continue;
    // The one-frame sets (counter 0), as a stack whose frame below is unknown.
    const int32_t node = pool.Intern(loc, 0, pool.Intern(0, 0, 0));
    SuffixKey key = d->KeyOf(pool, node, 1);
    const PositionCache& c = d->Cache(pool, node, 1, key);
    d->stats.uncertain_tokens += static_cast<int64_t>(c.uncertain.size());
    d->stats.cache_bytes += static_cast<int64_t>(
        c.accepted_bits.size() * 8 + c.accepted_ids.size() * 4 + c.uncertain.size() * 4);
    ++d->stats.positions;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<CompiledGrammarData>> BuildCompiledGrammar(GbnfGrammar grammar,
                                                                          const Vocabulary& vocab) {
  const auto t0 = std::chrono::steady_clock::now();
  auto d = std::make_unique<CompiledGrammarData>(vocab);
  d->gbnf = grammar;
  InlineSmallRules(&grammar);
  Lower(grammar, d.get());
  size_t longest = 0;
  for (int32_t id : vocab.data().sorted) longest = std::max(longest, vocab.data().bytes[id].size());
  d->counter_cap = static_cast<int32_t>(std::min<size_t>(longest + 2, 0xFFF0));
  BuildCaches(d.get());
  d->stats.rules = static_cast<int32_t>(d->alts.size());
  d->stats.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return d;
}

}  // namespace grammar_internal

CompiledGrammar::CompiledGrammar(std::unique_ptr<grammar_internal::CompiledGrammarData> data)
    : data_(std::move(data)) {}
CompiledGrammar::~CompiledGrammar() = default;

const Vocabulary& CompiledGrammar::vocabulary() const { return data_->vocab; }
int32_t CompiledGrammar::vocab_size() const { return data_->vocab.size(); }
const CompiledGrammar::Stats& CompiledGrammar::stats() const { return data_->stats; }
const GbnfGrammar& CompiledGrammar::gbnf() const { return data_->gbnf; }

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(GbnfGrammar grammar,
                                                                      const Vocabulary& vocab) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<grammar_internal::CompiledGrammarData> data,
                          grammar_internal::BuildCompiledGrammar(std::move(grammar), vocab));
  return std::shared_ptr<const CompiledGrammar>(std::make_shared<CompiledGrammar>(std::move(data)));
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(std::string_view gbnf,
                                                                      const Vocabulary& vocab,
                                                                      std::string_view root_rule) {
  TANDEM_ASSIGN_OR_RETURN(GbnfGrammar grammar, ParseGbnf(gbnf, root_rule));
  return CompileGrammar(std::move(grammar), vocab);
}

}  // namespace tandem
