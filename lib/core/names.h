// Names that peers send: job names, consumer and worker ids, addresses. They reach
// text logs, the journal, `ferry-ctl status` and Prometheus label values, so each is
// checked where it enters a daemon (a newline would forge a log line; a byte that is
// not UTF-8 fails a whole scrape), with an error that names the rule and never
// echoes the name itself.
#ifndef FERRY_CORE_NAMES_H_
#define FERRY_CORE_NAMES_H_

#include <cstdio>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry {

inline constexpr size_t kMaxNameLength = 200;

// A name is 1 to 200 bytes of printable ASCII other than space, '"', '\'' and '\\'
// (what a shell, a log line and a label value carry as they are).
inline bool NameByteAllowed(unsigned char c) { return c > 0x20 && c < 0x7f && c != '"' && c != '\'' && c != '\\'; }

// OK, or InvalidArgument naming `what` (e.g. "job name") and the rule broken.
inline Status CheckName(std::string_view what, std::string_view name) {
  const std::string rule = ": names are 1 to " + std::to_string(kMaxNameLength) +
                           " characters of printable ASCII without spaces, quotes or backslashes";
  if (name.empty()) return Status::InvalidArgument(std::string(what) + " is empty" + rule);
  if (name.size() > kMaxNameLength)
    return Status::InvalidArgument(std::string(what) + " is " + std::to_string(name.size()) + " bytes long" + rule);
  for (size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (!NameByteAllowed(c)) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02x", c);
      return Status::InvalidArgument(std::string(what) + " holds byte " + byte + " at offset " + std::to_string(i) +
                                     rule);
    }
  }
  return Status::OK();
}

// CheckName for a name that may be absent (empty is fine).
inline Status CheckOptionalName(std::string_view what, std::string_view name) {
  return name.empty() ? Status::OK() : CheckName(what, name);
}

}  // namespace ferry

#endif  // FERRY_CORE_NAMES_H_
