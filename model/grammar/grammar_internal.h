// Internals of model/grammar/: the vocabulary trie, the lowered (byte-level) grammar, the
// per-position token sets, and the stack pool both the compiler and the matcher step through.
// Not an API; include only from model/grammar/ and its tests.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "model/grammar/compiled_grammar.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/vocabulary.h"

namespace tandem::grammar_internal {

// ---- Vocabulary ------------------------------------------------------------------------------

struct TrieNode {
  uint8_t byte = 0;    // the byte leading here (root: unused)
  uint16_t depth = 0;  // bytes from the root
  uint32_t end = 0;    // preorder index one past this node's subtree
  int32_t tok_lo = 0;  // sorted tokens in the subtree: [tok_lo, tok_hi)
  int32_t tok_hi = 0;
  int32_t here_hi = 0;  // tokens ending exactly here: [tok_lo, here_hi)
};

struct VocabData {
  std::vector<std::string> bytes;  // id -> bytes
  std::vector<uint8_t> never;      // id -> never allowed
  size_t max_len = 0;
  std::vector<int32_t> sorted;     // sorted index -> token id (allowed tokens, by bytes)
  std::vector<int32_t> sorted_of;  // token id -> sorted index, -1 when never allowed
  std::vector<TrieNode> trie;      // preorder; [0] is the root (depth 0)
};

void BuildTrie(VocabData* data);

// ---- Lowered grammar ---------------------------------------------------------------------------

// kEnd ends an alternative; kLoop ends an alternative of a repetition rule (one round done).
enum class ElemKind : uint8_t { kClass, kRef, kEnd, kLoop };

struct Elem {
  ElemKind kind = ElemKind::kEnd;
  int32_t arg = -1;  // kClass: class id; kRef: rule id
};

// A code point class as a byte DFA over its UTF-8 encodings. State 0 starts; trans[state *
// 256 + byte] is the next state (>= 1), kAccept (a whole character read) or kReject.
struct ByteClass {
  static constexpr int16_t kAccept = -1;
  static constexpr int16_t kReject = -2;
  int32_t num_states = 1;
  std::vector<int16_t> trans;
};

// Tokens at one position (a class element in one DFA state), with only that position's rule
// frame on the stack.
struct PositionCache {
  std::vector<uint64_t> accepted_bits;  // by token id, when the set is large
  std::vector<int32_t> accepted_ids;    // sorted token ids, when small
  std::vector<int32_t> uncertain;       // sorted indices (trie order)
  int32_t accepted_count = 0;
};

class FrameWalker;

// A location: an element in a DFA state. Locations [0, elems.size()) are the elements in state
// 0; class elements in later states get further ids.
//
// Token sets are cached per stack suffix: the top frame, or, when that leaves too many tokens
// uncertain, the top 2, 3, ... frames (up to kMaxFrames; a suffix that reaches the bottom is
// exact). A frame is (location, counter class): outside repetition rules the counter is 0;
// inside one, two counters with the same rounds-left-to-min and rounds-left-to-max, each capped
// at what a token can consume, see the same tokens (FrameKey). The one-frame sets of counter 0
// are built by CompileGrammar; others on first use (under `mu`).
inline constexpr int kMaxFrames = 6;

struct SuffixKey {
  uint8_t n = 0;          // frames
  bool complete = false;  // the frames are the whole stack
  uint64_t k[kMaxFrames] = {};
  bool operator==(const SuffixKey& o) const {
    if (n != o.n || complete != o.complete) return false;
    for (int i = 0; i < n; ++i) {
      if (k[i] != o.k[i]) return false;
    }
    return true;
  }
  bool operator<(const SuffixKey& o) const {
    if (n != o.n) return n < o.n;
    if (complete != o.complete) return complete < o.complete;
    for (int i = 0; i < n; ++i) {
      if (k[i] != o.k[i]) return k[i] < o.k[i];
    }
    return false;
  }
  template <typename H>
  friend H AbslHashValue(H h, const SuffixKey& s) {
    h = H::combine(std::move(h), s.n, s.complete);
    for (int i = 0; i < s.n; ++i) h = H::combine(std::move(h), s.k[i]);
    return h;
  }
};

class StackPool;

struct CompiledGrammarData {
  explicit CompiledGrammarData(Vocabulary v) : vocab(std::move(v)) {}
  ~CompiledGrammarData();

  Vocabulary vocab;
  GbnfGrammar gbnf;
  std::vector<Elem> elems;                  // [0] = ref to the root, [1] = end
  std::vector<std::vector<int32_t>> alts;   // rule -> alternative start elements
  std::vector<int32_t> rule_min, rule_max;  // repetition rules: counts (max -1: unbounded)
  std::vector<uint8_t> rule_repeat;         // rule -> is a repetition rule
  std::vector<uint8_t> rule_body_nullable;  // repetition rule -> a round may match ""
  std::vector<int32_t> elem_rule;           // element -> its rule (-1 for [0], [1])
  std::vector<ByteClass> classes;
  std::vector<int32_t> loc_elem;        // location -> element
  std::vector<int32_t> loc_state;       // location -> DFA state
  std::vector<int32_t> extra_loc_base;  // element -> location of its state 1 (classes)
  int32_t counter_cap = 0;              // rounds one token can complete, + 2
  CompiledGrammar::Stats stats;

  mutable absl::Mutex mu;
  // key -> cache; caches never move once made (deque).
  mutable absl::flat_hash_map<SuffixKey, const PositionCache*> cache_index ABSL_GUARDED_BY(mu);
  mutable std::deque<PositionCache> caches ABSL_GUARDED_BY(mu);
  mutable std::unique_ptr<FrameWalker> walker ABSL_GUARDED_BY(mu);

  int32_t Loc(int32_t elem, int32_t state) const {
    return state == 0 ? elem : extra_loc_base[elem] + state - 1;
  }
  // One frame's part of a cache key.
  uint64_t FrameKey(int32_t loc, int32_t counter) const;
  // The key of the top `frames` frames of the stack whose top is `node`.
  SuffixKey KeyOf(const StackPool& pool, int32_t node, int frames) const;
  // The token sets for that suffix (computed now when new). Thread-safe.
  // `shallower`: the sets of the top frames - 1 (frames > 1): only its uncertain tokens are
  // walked again.
  const PositionCache& Cache(const StackPool& pool, int32_t node, int frames, const SuffixKey& key,
                             const PositionCache* shallower = nullptr) const;
};

// ---- Stacks ------------------------------------------------------------------------------------

// Persistent stacks, hash-consed: a node is (location, counter, parent); node 0 is the bottom
// (the grammar finished, or, when the compiler walks one frame, "left the frame"). The counter
// is the number of finished rounds of the frame's repetition rule (0 outside one).
class StackPool {
 public:
  struct Node {
    int32_t loc;
    int32_t counter;
    int32_t parent;
  };
  StackPool() { Clear(); }
  void Clear();
  int32_t Intern(int32_t loc, int32_t counter, int32_t parent);
  const Node& node(int32_t id) const { return nodes_[id]; }
  size_t size() const { return nodes_.size(); }
  // Forgets nodes [n, size()) (speculative steps).
  void Truncate(size_t n);
  // Keeps only the nodes reachable from `roots` (renumbered; order kept), rewriting roots.
  void Compact(std::vector<int32_t>* roots);

 private:
  struct Key {
    uint64_t loc_parent;
    int32_t counter;
    bool operator==(const Key& o) const {
      return loc_parent == o.loc_parent && counter == o.counter;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.loc_parent, k.counter);
    }
  };
  static Key KeyOf(const Node& n) {
    return Key{(static_cast<uint64_t>(static_cast<uint32_t>(n.loc)) << 32) |
                   static_cast<uint32_t>(n.parent),
               n.counter};
  }
  std::vector<Node> nodes_;
  absl::flat_hash_map<Key, int32_t> index_;
};

// Steps sets of stacks by one byte. Sets are vectors of node ids whose tops are class
// locations (or node 0); the results are sorted and free of duplicates.
class Stepper {
 public:
  explicit Stepper(const CompiledGrammarData& g) : g_(g) {}
  // The closure of a single node (rule references expanded).
  void Expand(StackPool* pool, int32_t node, std::vector<int32_t>* out);
  void Step(StackPool* pool, const std::vector<int32_t>& in, uint8_t byte,
            std::vector<int32_t>* out);

 private:
  void BeginSet(const StackPool& pool);
  void ExpandInto(StackPool* pool, int32_t node, std::vector<int32_t>* out);
  // The node that continues after element `elem` of a frame (counter, parent).
  int32_t After(StackPool* pool, int32_t elem, int32_t counter, int32_t parent);
  bool Mark(int32_t node);

  const CompiledGrammarData& g_;
  std::vector<uint32_t> stamp_;
  uint32_t epoch_ = 0;
  std::vector<int32_t> work_;
};

// Computes token sets by walking the vocabulary trie over a lazily built DFA of frame-local
// stack sets (node 0 = "left the frame"). Defined in compiled_grammar.cc.
class FrameWalker {
 public:
  explicit FrameWalker(const CompiledGrammarData& g);
  ~FrameWalker();
  // frames: (location, counter) from the top down; complete: they are the whole stack.
  PositionCache Walk(const std::vector<std::pair<int32_t, int32_t>>& frames, bool complete);
  // The same for more frames than `shallower` was made with: its accepted tokens stay accepted
  // (more context only settles uncertain ones), so only its uncertain tokens are walked.
  PositionCache Refine(const std::vector<std::pair<int32_t, int32_t>>& frames, bool complete,
                       const PositionCache& shallower);
  size_t num_states() const;

 private:
  static void SetAccepted(const VocabData& v, const std::vector<int32_t>& sorted_indices,
                          PositionCache* cache);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Builds the data (lowering + caches). Defined in compiled_grammar.cc.
absl::StatusOr<std::unique_ptr<CompiledGrammarData>> BuildCompiledGrammar(GbnfGrammar grammar,
                                                                          const Vocabulary& vocab);

}  // namespace tandem::grammar_internal
