// FERRY_CHECK: invariants whose failure is a bug. They abort loudly, in every build.
// Input from outside (files, peers, flags) is never checked with these: it gets a Status.
#ifndef FERRY_CORE_CHECK_H_
#define FERRY_CORE_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FERRY_CHECK(cond)                                                           \
  do {                                                                              \
    if (__builtin_expect(!(cond), 0)) {                                             \
      std::fprintf(stderr, "%s:%d: FERRY_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

#endif  // FERRY_CORE_CHECK_H_
