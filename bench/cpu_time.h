// Process CPU time and wall time, for figures "per CPU-second".
#ifndef FERRY_BENCH_CPU_TIME_H_
#define FERRY_BENCH_CPU_TIME_H_

#include <sys/resource.h>

#include <chrono>

namespace ferry::bench {

// User + system CPU seconds of the whole process (all threads).
inline double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

inline double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace ferry::bench

#endif  // FERRY_BENCH_CPU_TIME_H_
