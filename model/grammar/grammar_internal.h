// Internals of model/grammar/: the vocabulary trie, the lowered (byte-level) grammar, the
// per-position token sets, and the stack pool both the compiler and the matcher step through.
// Not an API; include only from model/grammar/ and its tests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
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

enum class ElemKind : uint8_t { kClass, kRef, kEnd };

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

// A location: an element in a DFA state. Locations [0, elems.size()) are the elements in state
// 0; class elements in later states get further ids.
struct CompiledGrammarData {
  Vocabulary vocab;
  GbnfGrammar gbnf;
  std::vector<Elem> elems;                 // [0] = ref to the root, [1] = end
  std::vector<std::vector<int32_t>> alts;  // rule -> alternative start elements
  std::vector<ByteClass> classes;
  std::vector<int32_t> loc_elem;        // location -> element
  std::vector<int32_t> loc_state;       // location -> DFA state
  std::vector<int32_t> extra_loc_base;  // element -> location of its state 1 (classes)
  std::vector<int32_t> cache_of_loc;    // location -> index in caches, -1 for none
  std::vector<PositionCache> caches;
  CompiledGrammar::Stats stats;

  int32_t Loc(int32_t elem, int32_t state) const {
    return state == 0 ? elem : extra_loc_base[elem] + state - 1;
  }
};

// ---- Stacks ------------------------------------------------------------------------------------

// Persistent stacks, hash-consed: a node is (location, parent); node 0 is the bottom (the
// grammar finished, or, when the compiler walks one frame, "left the frame").
class StackPool {
 public:
  struct Node {
    int32_t loc;
    int32_t parent;
  };
  StackPool() { Clear(); }
  void Clear();
  int32_t Intern(int32_t loc, int32_t parent);
  const Node& node(int32_t id) const { return nodes_[id]; }
  size_t size() const { return nodes_.size(); }
  // Forgets nodes [n, size()) (speculative steps).
  void Truncate(size_t n);
  // Keeps only the nodes reachable from `roots` (renumbered; order kept), rewriting roots.
  void Compact(std::vector<int32_t>* roots);

 private:
  static uint64_t Key(int32_t loc, int32_t parent) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(loc)) << 32) |
           static_cast<uint32_t>(parent);
  }
  std::vector<Node> nodes_;
  absl::flat_hash_map<uint64_t, int32_t> index_;
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
  bool Mark(int32_t node);

  const CompiledGrammarData& g_;
  std::vector<uint32_t> stamp_;
  uint32_t epoch_ = 0;
  std::vector<int32_t> work_;
};

// Builds the data (lowering + caches). Defined in compiled_grammar.cc.
absl::StatusOr<std::unique_ptr<CompiledGrammarData>> BuildCompiledGrammar(GbnfGrammar grammar,
                                                                          const Vocabulary& vocab);

}  // namespace tandem::grammar_internal
