// Logging for the daemons: one line per event on stderr, with a UTC timestamp (ISO
// 8601, milliseconds), the program's name and the level:
//
//   2026-11-23T17:40:01.123Z ferry-dispatcher info: worker w1 at 10.0.0.5:7000 registered
//
// Levels: debug (every lease and acknowledgement: for finding out why a job stalls),
// info (the default: peers coming and going, jobs), warn (refusals, lost peers, skipped
// samples), error (what stops a daemon). The level comes from --log-level, else from
// FERRY_LOG_LEVEL, else info. Thread-safe (one fprintf per line).
//
// --log-format json (or FERRY_LOG_FORMAT=json) writes one JSON object per line instead,
// for log collectors (Loki, Cloud Logging, Elasticsearch):
//
//   {"ts":"2026-11-23T17:40:01.123Z","program":"ferry-dispatcher","level":"info","msg":"..."}
#ifndef FERRY_CORE_LOG_H_
#define FERRY_CORE_LOG_H_

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <sys/time.h>

namespace ferry {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

inline const char* LogLevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "?";
}

// "debug", "info", "warn" (or "warning"), "error", "off"; nothing else.
inline std::optional<LogLevel> ParseLogLevel(std::string_view s) {
  if (s == "debug") return LogLevel::kDebug;
  if (s == "info") return LogLevel::kInfo;
  if (s == "warn" || s == "warning") return LogLevel::kWarn;
  if (s == "error") return LogLevel::kError;
  if (s == "off") return LogLevel::kOff;
  return std::nullopt;
}

inline const char*& LogProgramName() {
  static const char* name = "ferry";
  return name;
}

inline std::atomic<int>& LogLevelFlag() {
  static std::atomic<int> level{[] {
    const char* env = std::getenv("FERRY_LOG_LEVEL");
    auto l = env != nullptr ? ParseLogLevel(env) : std::nullopt;
    return int(l.value_or(LogLevel::kInfo));
  }()};
  return level;
}
inline void SetLogLevel(LogLevel l) { LogLevelFlag().store(int(l), std::memory_order_relaxed); }
inline LogLevel GetLogLevel() { return LogLevel(LogLevelFlag().load(std::memory_order_relaxed)); }
inline bool LogEnabled(LogLevel l) { return int(l) >= LogLevelFlag().load(std::memory_order_relaxed); }

// Text (the default) or JSON lines.
inline std::atomic<bool>& LogJsonFlag() {
  static std::atomic<bool> json{[] {
    const char* env = std::getenv("FERRY_LOG_FORMAT");
    return env != nullptr && std::strcmp(env, "json") == 0;
  }()};
  return json;
}
inline void SetLogJson(bool json) { LogJsonFlag().store(json, std::memory_order_relaxed); }

// `s` as the inside of a JSON string.
inline void AppendJsonEscaped(std::string_view s, char* out, size_t cap, size_t* len) {
  auto put = [&](char c) {
    if (*len + 1 < cap) out[(*len)++] = c;
  };
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      put('\\');
      put(char(c));
    } else if (c == '\n') {
      put('\\');
      put('n');
    } else if (c < 0x20) {
      char u[8];
      std::snprintf(u, sizeof u, "\\u%04x", c);
      for (char* p = u; *p; ++p) put(*p);
    } else {
      put(char(c));
    }
  }
  out[*len] = '\0';
}

// Quiet: nothing at all (fuzzers, which run the daemons' code millions of times).
inline void SetLogQuiet(bool quiet) { SetLogLevel(quiet ? LogLevel::kOff : LogLevel::kInfo); }

inline void VLogAt(LogLevel level, const char* fmt, va_list ap) {
  if (!LogEnabled(level) || level == LogLevel::kOff) return;
  char msg[2048];
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm t;
  gmtime_r(&tv.tv_sec, &t);
  if (LogJsonFlag().load(std::memory_order_relaxed)) {
    char escaped[sizeof msg * 2];
    size_t n = 0;
    AppendJsonEscaped(msg, escaped, sizeof escaped, &n);
    std::fprintf(stderr,
                 "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\",\"program\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n",
                 t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, int(tv.tv_usec / 1000),
                 LogProgramName(), LogLevelName(level), escaped);
    return;
  }
  std::fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s %s: %s\n", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
               t.tm_hour, t.tm_min, t.tm_sec, int(tv.tv_usec / 1000), LogProgramName(), LogLevelName(level), msg);
}

__attribute__((format(printf, 2, 3))) inline void LogAt(LogLevel level, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  VLogAt(level, fmt, ap);
  va_end(ap);
}

// Log() is info.
__attribute__((format(printf, 1, 2))) inline void Log(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  VLogAt(LogLevel::kInfo, fmt, ap);
  va_end(ap);
}
__attribute__((format(printf, 1, 2))) inline void LogDebug(const char* fmt, ...) {
  if (!LogEnabled(LogLevel::kDebug)) return;  // before formatting: debug lines are many
  va_list ap;
  va_start(ap, fmt);
  VLogAt(LogLevel::kDebug, fmt, ap);
  va_end(ap);
}
__attribute__((format(printf, 1, 2))) inline void LogWarn(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  VLogAt(LogLevel::kWarn, fmt, ap);
  va_end(ap);
}
__attribute__((format(printf, 1, 2))) inline void LogError(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  VLogAt(LogLevel::kError, fmt, ap);
  va_end(ap);
}

}  // namespace ferry

#endif  // FERRY_CORE_LOG_H_
