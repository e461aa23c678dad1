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
#include <cstdint>
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

// The length of the well-formed UTF-8 sequence at the start of `s` (1 to 4), or 0 if
// it is not one (a stray continuation byte, an overlong form, a surrogate, past
// U+10FFFF, or cut short: a message truncated mid-character).
inline size_t Utf8SequenceLength(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  return n;
}

// `s` as the inside of a JSON string, into out[*len, cap) and NUL-terminated. Each
// escape or character goes in whole or not at all, so a full buffer still ends in
// valid JSON; bytes that are not UTF-8 become U+FFFD.
inline void AppendJsonEscaped(std::string_view s, char* out, size_t cap, size_t* len) {
  if (cap == 0) return;
  auto put = [&](const char* p, size_t n) {
    if (*len + n >= cap) return false;
    std::memcpy(out + *len, p, n);
    *len += n;
    return true;
  };
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    bool ok;
    size_t step = 1;
    if (c == '"' || c == '\\') {
      const char e[2] = {'\\', char(c)};
      ok = put(e, 2);
    } else if (c == '\n') {
      ok = put("\\n", 2);
    } else if (c < 0x20 || c == 0x7f) {
      char u[8];
      std::snprintf(u, sizeof u, "\\u%04x", c);
      ok = put(u, 6);
    } else if (c < 0x80) {
      ok = put(s.data() + i, 1);
    } else if (size_t n = Utf8SequenceLength(s.substr(i)); n > 0) {
      ok = put(s.data() + i, n);
      step = n;
    } else {
      ok = put("\\ufffd", 6);
    }
    if (!ok) break;
    i += step;
  }
  out[*len] = '\0';
}

// `s` for a text log line, into out[*len, cap) and NUL-terminated: control bytes and
// bytes that are not UTF-8 become \xNN (\n for a newline), so that a name a peer sent
// can never start a line of its own or garble the terminal.
inline void AppendTextEscaped(std::string_view s, char* out, size_t cap, size_t* len) {
  if (cap == 0) return;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = 1;
    char e[8];
    const char* p = s.data() + i;
    size_t k = 1;
    if (c == '\n') {
      p = "\\n";
      k = 2;
    } else if (c < 0x20 || c == 0x7f) {
      std::snprintf(e, sizeof e, "\\x%02x", c);
      p = e;
      k = 4;
    } else if (c >= 0x80) {
      n = Utf8SequenceLength(s.substr(i));
      if (n == 0) {
        std::snprintf(e, sizeof e, "\\x%02x", c);
        p = e;
        k = 4;
        n = 1;
      } else {
        k = n;
      }
    }
    if (*len + k >= cap) break;
    std::memcpy(out + *len, p, k);
    *len += k;
    i += n;
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
    char escaped[sizeof msg * 6];  // room for every byte's longest escape
    size_t n = 0;
    AppendJsonEscaped(msg, escaped, sizeof escaped, &n);
    std::fprintf(stderr,
                 "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\",\"program\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n",
                 t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, int(tv.tv_usec / 1000),
                 LogProgramName(), LogLevelName(level), escaped);
    return;
  }
  char escaped[sizeof msg * 4];  // room for every byte's longest escape
  size_t n = 0;
  AppendTextEscaped(msg, escaped, sizeof escaped, &n);
  std::fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s %s: %s\n", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
               t.tm_hour, t.tm_min, t.tm_sec, int(tv.tv_usec / 1000), LogProgramName(), LogLevelName(level), escaped);
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
