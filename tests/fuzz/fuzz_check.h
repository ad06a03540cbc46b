#pragma once
// FUZZ_CHECK: an invariant of a parser under fuzzing. Unlike assert() it
// stays on in release builds (a Clang project build adds -DNDEBUG), and it
// prints the condition before aborting so libFuzzer saves the input as a
// crash.

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                             \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)
