// Happens-before edges that ThreadSanitizer cannot see for itself. oneTBB's scheduler
// lives in libtbb, which is not instrumented: when a thread enqueues a task (or a
// parallel_for forks and joins), the ordering libtbb provides is invisible to TSan,
// and every handoff through it would read as a data race. These macros state those
// edges where Ferry hands data to TBB and takes it back; they compile to nothing
// without TSan.
//   FERRY_TSAN_RELEASE(p)  everything this thread did so far is published under p
//   FERRY_TSAN_ACQUIRE(p)  this thread now sees what was published under p
#ifndef FERRY_CORE_TSAN_H_
#define FERRY_CORE_TSAN_H_

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FERRY_TSAN_ENABLED 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define FERRY_TSAN_ENABLED 1
#endif

#if defined(FERRY_TSAN_ENABLED)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#define FERRY_TSAN_ACQUIRE(p) __tsan_acquire(const_cast<void*>(static_cast<const volatile void*>(p)))
#define FERRY_TSAN_RELEASE(p) __tsan_release(const_cast<void*>(static_cast<const volatile void*>(p)))
#else
#define FERRY_TSAN_ACQUIRE(p) ((void)0)
#define FERRY_TSAN_RELEASE(p) ((void)0)
#endif

#endif  // FERRY_CORE_TSAN_H_
