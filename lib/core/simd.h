// FERRY_TARGET_CLONES_AVX2: runtime dispatch between an AVX2 and a default build of a
// hot loop (GCC/Clang target_clones: an ifunc picks one when the program loads), so
// that one binary uses AVX2 where the CPU has it and runs everywhere else.
//
// Not under ThreadSanitizer: the ifunc resolver would run, instrumented, before the
// TSan runtime is up, and crash the program at load; the default build alone is as
// correct, only slower.
#ifndef FERRY_CORE_SIMD_H_
#define FERRY_CORE_SIMD_H_

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERRY_NO_IFUNC 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define FERRY_NO_IFUNC 1
#endif
#if defined(FERRY_NO_IFUNC) || !defined(__x86_64__)
#define FERRY_TARGET_CLONES_AVX2
#else
#define FERRY_TARGET_CLONES_AVX2 __attribute__((target_clones("avx2", "default")))
#endif

#endif  // FERRY_CORE_SIMD_H_
