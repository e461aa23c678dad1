// Clang's thread-safety annotations as macros (no-ops for other compilers), so that a
// missed lock is a compile error under -Wthread-safety rather than a comment
// (LevelDB's port/thread_annotations.h, Abseil's base/thread_annotations.h).
//
//   Mutex mu_;
//   int n_ GUARDED_BY(mu_);
//   void Bump() EXCLUSIVE_LOCKS_REQUIRED(mu_);
//
// libstdc++'s std::mutex carries no annotations, so guarded state uses ferry::Mutex
// (core/mutex.h), which does.
#ifndef FERRY_CORE_THREAD_ANNOTATIONS_H_
#define FERRY_CORE_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define FERRY_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define FERRY_THREAD_ANNOTATION_(x)
#endif

#define CAPABILITY(x) FERRY_THREAD_ANNOTATION_(capability(x))
#define SCOPED_CAPABILITY FERRY_THREAD_ANNOTATION_(scoped_lockable)
#define GUARDED_BY(x) FERRY_THREAD_ANNOTATION_(guarded_by(x))
#define PT_GUARDED_BY(x) FERRY_THREAD_ANNOTATION_(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) FERRY_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) FERRY_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))
#define EXCLUSIVE_LOCKS_REQUIRED(...) FERRY_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define LOCKS_EXCLUDED(...) FERRY_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
#define EXCLUSIVE_LOCK_FUNCTION(...) FERRY_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define UNLOCK_FUNCTION(...) FERRY_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
#define ASSERT_EXCLUSIVE_LOCK(...) FERRY_THREAD_ANNOTATION_(assert_capability(__VA_ARGS__))
#define RETURN_CAPABILITY(x) FERRY_THREAD_ANNOTATION_(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS FERRY_THREAD_ANNOTATION_(no_thread_safety_analysis)

#endif  // FERRY_CORE_THREAD_ANNOTATIONS_H_
