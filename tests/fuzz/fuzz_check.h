// What a fuzz target asserts beyond "no sanitizer report": an invariant of the code under test
// (a round trip, a documented error code). A broken invariant prints the expression and aborts,
// which libFuzzer reports as a crash (and the replay test as a failure) with the input saved.
#pragma once

#include <cstdio>
#include <cstdlib>

#define TANDEM_FUZZ_CHECK(cond)                                                              \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (false)
