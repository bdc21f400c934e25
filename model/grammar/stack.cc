// StackPool and Stepper: the byte step both the compiler (one frame) and the matcher (whole
// stacks) use.
#include <algorithm>

#include "model/grammar/grammar_internal.h"

namespace tandem::grammar_internal {

void StackPool::Clear() {
  nodes_.clear();
  index_.clear();
  nodes_.push_back(Node{-1, 0, -1});  // 0: the bottom
}

int32_t StackPool::Intern(int32_t loc, int32_t counter, int32_t parent) {
  const Node n{loc, counter, parent};
  auto [it, inserted] = index_.try_emplace(KeyOf(n), static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back(n);
  return it->second;
}

void StackPool::Truncate(size_t n) {
  if (n < 1) n = 1;
  for (size_t i = n; i < nodes_.size(); ++i) index_.erase(KeyOf(nodes_[i]));
  nodes_.resize(std::min(n, nodes_.size()));
}

void StackPool::Compact(std::vector<int32_t>* roots) {
  std::vector<uint8_t> live(nodes_.size(), 0);
  live[0] = 1;
  for (int32_t r : *roots) {
    for (int32_t n = r; n > 0 && !live[n]; n = nodes_[n].parent) live[n] = 1;
  }
  std::vector<int32_t> remap(nodes_.size(), -1);
  std::vector<Node> kept;
  kept.reserve(nodes_.size());
  index_.clear();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!live[i]) continue;
    Node n = nodes_[i];
    if (i > 0) n.parent = remap[n.parent];  // parents precede children
    remap[i] = static_cast<int32_t>(kept.size());
    if (i > 0) index_.emplace(KeyOf(n), remap[i]);
    kept.push_back(n);
  }
  nodes_ = std::move(kept);
  for (int32_t& r : *roots) r = remap[r];
}

bool Stepper::Mark(int32_t node) {
  if (static_cast<size_t>(node) >= stamp_.size()) stamp_.resize(node + 1024, 0);
  if (stamp_[node] == epoch_) return false;
  stamp_[node] = epoch_;
  return true;
}

void Stepper::BeginSet(const StackPool& pool) {
  if (++epoch_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    epoch_ = 1;
  }
  if (stamp_.size() < pool.size()) stamp_.resize(pool.size() + 1024, 0);
}

int32_t Stepper::After(StackPool* pool, int32_t elem, int32_t counter, int32_t parent) {
  // A frame that has nothing left is not kept (tail calls do not grow the stack); the end of a
  // repetition round is kept, it decides what comes next.
  if (g_.elems[elem + 1].kind == ElemKind::kEnd) return parent;
  return pool->Intern(elem + 1, counter, parent);
}

void Stepper::ExpandInto(StackPool* pool, int32_t start, std::vector<int32_t>* out) {
  work_.clear();
  work_.push_back(start);
  while (!work_.empty()) {
    const int32_t n = work_.back();
    work_.pop_back();
    if (!Mark(n)) continue;
    if (n == 0) {
      out->push_back(0);
      continue;
    }
    const StackPool::Node node = pool->node(n);
    const int32_t e = g_.loc_elem[node.loc];
    const Elem& elem = g_.elems[e];
    switch (elem.kind) {
      case ElemKind::kClass:
        out->push_back(n);
        break;
      case ElemKind::kLoop: {
        // One round of a repetition rule done.
        const int32_t r = g_.elem_rule[e];
        const int32_t min = g_.rule_min[r], max = g_.rule_max[r];
        int32_t done = node.counter + 1;
        if (max < 0) done = std::min(done, min);  // past the minimum, unbounded: all alike
        if (max < 0 || done < max) {
          for (const int32_t a : g_.alts[r]) work_.push_back(pool->Intern(a, done, node.parent));
        }
        if (node.counter + 1 >= min) work_.push_back(node.parent);
        break;
      }
      case ElemKind::kRef: {
        const int32_t r = elem.arg;
        const int32_t cont = After(pool, e, node.counter, node.parent);
        if (g_.rule_repeat[r]) {
          if (g_.rule_min[r] == 0) work_.push_back(cont);
          if (g_.rule_max[r] != 0) {
            for (const int32_t a : g_.alts[r]) work_.push_back(pool->Intern(a, 0, cont));
          }
        } else {
          for (const int32_t a : g_.alts[r]) {
            work_.push_back(g_.elems[a].kind == ElemKind::kEnd ? cont : pool->Intern(a, 0, cont));
          }
        }
        break;
      }
      case ElemKind::kEnd:
        break;  // never a node
    }
  }
}

void Stepper::Expand(StackPool* pool, int32_t node, std::vector<int32_t>* out) {
  out->clear();
  BeginSet(*pool);
  ExpandInto(pool, node, out);
  std::sort(out->begin(), out->end());
}

void Stepper::Step(StackPool* pool, const std::vector<int32_t>& in, uint8_t byte,
                   std::vector<int32_t>* out) {
  out->clear();
  BeginSet(*pool);
  for (const int32_t n : in) {
    if (n == 0) continue;
    const StackPool::Node node = pool->node(n);
    const int32_t e = g_.loc_elem[node.loc];
    const ByteClass& cls = g_.classes[g_.elems[e].arg];
    const int16_t t = cls.trans[g_.loc_state[node.loc] * 256 + byte];
    if (t == ByteClass::kReject) continue;
    if (t >= 1) {
      const int32_t next = pool->Intern(g_.Loc(e, t), node.counter, node.parent);
      if (Mark(next)) out->push_back(next);
      continue;
    }
    // The character is complete: on to the next element.
    ExpandInto(pool, After(pool, e, node.counter, node.parent), out);
  }
  std::sort(out->begin(), out->end());
}

}  // namespace tandem::grammar_internal
