// Test harness for the KV transfer planner: executes a plan with memcpy between in-memory pools
// and checks the result against what each destination rank would have written itself.
//
// Source pools hold, in every slot of an allocated block, a code of (head, layer, K|V, position,
// dim) — flagged as "tail" past the prompt — and garbage in blocks not allocated to the request.
// Checks, per byte: reads only of allocated source blocks, no source byte read twice by one
// destination rank, writes only into allocated destination blocks, no byte written twice; every
// prompt element written with its code; slots past the prompt written only inside blocks that are
// one source block slot for slot (the planner's whole-slab case), and then with the same
// position's tail code. Also checks ordering/merging of copies and the copy-count bounds, and
// that KV digests (kv_digest.h) computed on the source verify what the plan landed, and catch a
// byte flipped at the start of a random destination copy.
#pragma once

#include <cstdint>
#include <string>

#include "kv_transfer/transfer_types.h"

namespace tandem::testing {

// splitmix64: deterministic on every platform (std distributions are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform-enough in [0, n), n >= 1.
  int64_t Below(int64_t n) { return static_cast<int64_t>(Next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t s_;
};

struct PairCase {
  KvLayout src;
  KvLayout dst;
  int64_t num_tokens = 0;
  int table_mode = 0;  // 0 random block ids, 1 contiguous, 2 shuffled runs of consecutive ids
  uint64_t seed = 1;   // block tables, pool sizes, garbage

  std::string Describe() const;
};

// Element codes are unique only while positions stay small: true iff every allocated position of
// `c` can be coded in the element type of c.src.dtype.
bool CodesFit(const PairCase& c);

// Empty on success, else the first violation found.
std::string SimulatePlan(const PairCase& c);

}  // namespace tandem::testing
