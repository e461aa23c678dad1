// Minimal logging for the daemons: one line per event on stderr, with a UTC
// timestamp and the program's name. Thread-safe (one fprintf per line).
#ifndef FERRY_CORE_LOG_H_
#define FERRY_CORE_LOG_H_

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <sys/time.h>

namespace ferry {

inline const char*& LogProgramName() {
  static const char* name = "ferry";
  return name;
}

// Quiet: Log() prints nothing (fuzzers, which run the daemons' code millions of times).
inline std::atomic<bool>& LogQuietFlag() {
  static std::atomic<bool> quiet{false};
  return quiet;
}
inline void SetLogQuiet(bool quiet) { LogQuietFlag().store(quiet, std::memory_order_relaxed); }

__attribute__((format(printf, 1, 2))) inline void Log(const char* fmt, ...) {
  if (LogQuietFlag().load(std::memory_order_relaxed)) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm t;
  gmtime_r(&tv.tv_sec, &t);
  std::fprintf(stderr, "%02d:%02d:%02d.%03d %s: %s\n", t.tm_hour, t.tm_min, t.tm_sec, int(tv.tv_usec / 1000),
               LogProgramName(), msg);
}

}  // namespace ferry

#endif  // FERRY_CORE_LOG_H_
