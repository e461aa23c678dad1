// Small ASCII string helpers shared by the libraries.
#ifndef FERRY_CORE_STRINGS_H_
#define FERRY_CORE_STRINGS_H_

#include <cstddef>
#include <string_view>

namespace ferry {

// Whether `s` starts with `lower_prefix`, ignoring the case of `s`'s ASCII letters
// (`lower_prefix` is written in lower case: "s3://", "169.254.").
inline bool StartsWithNoCase(std::string_view s, std::string_view lower_prefix) {
  if (s.size() < lower_prefix.size()) return false;
  for (size_t i = 0; i < lower_prefix.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (c != lower_prefix[i]) return false;
  }
  return true;
}

}  // namespace ferry

#endif  // FERRY_CORE_STRINGS_H_
