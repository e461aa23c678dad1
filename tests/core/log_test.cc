// --log-format json's escaping: every line is valid JSON whatever a message holds
// (quotes, control bytes, bytes that are not UTF-8, a character cut by truncation),
// and a full buffer ends at a whole escape.
#include <gtest/gtest.h>

#include <string>

#include "core/log.h"

namespace ferry {
namespace {

std::string Escaped(std::string_view s, size_t cap = 4096) {
  std::string out(cap, '\x01');
  size_t n = 0;
  AppendJsonEscaped(s, out.data(), cap, &n);
  EXPECT_EQ(out[n], '\0');
  return out.substr(0, n);
}

// Whether `s` is a valid JSON string body: escapes whole, no raw control bytes, UTF-8.
bool ValidJsonBody(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c < 0x20) return false;
    if (c == '\\') {
      if (i + 1 >= s.size()) return false;
      const char e = s[i + 1];
      if (e == 'u') {
        if (i + 6 > s.size()) return false;
        for (size_t k = i + 2; k < i + 6; ++k)
          if (!std::isxdigit(static_cast<unsigned char>(s[k]))) return false;
        i += 6;
      } else if (std::string("\"\\/bfnrt").find(e) != std::string::npos) {
        i += 2;
      } else {
        return false;
      }
      continue;
    }
    const size_t n = Utf8SequenceLength(std::string_view(s).substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

TEST(LogTest, JsonEscapesQuotesControlBytesAndBadUtf8) {
  EXPECT_EQ(Escaped("a \"b\" \\ c\nd"), "a \\\"b\\\" \\\\ c\\nd");
  EXPECT_EQ(Escaped(std::string("\x01\x1f\x7f", 3)), "\\u0001\\u001f\\u007f");
  EXPECT_EQ(Escaped("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\xa2"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\xa2") << "UTF-8 kept";
  EXPECT_EQ(Escaped("\xff"), "\\ufffd");
  EXPECT_EQ(Escaped("\xc0\xaf"), "\\ufffd\\ufffd") << "overlong";
  EXPECT_EQ(Escaped("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd") << "a surrogate";
  EXPECT_EQ(Escaped("ab\xe2\x82"), "ab\\ufffd\\ufffd") << "a character cut short";
  EXPECT_EQ(Escaped("\x80x"), "\\ufffdx");
}

TEST(LogTest, AFullBufferEndsAtAWholeEscape) {
  // Every cut of a message full of escapes is still valid JSON.
  const std::string msg = std::string("\"\\\n\x01\xe2\x82\xac\xff") + "plain";
  for (size_t cap = 1; cap < 40; ++cap) {
    const std::string e = Escaped(msg, cap);
    EXPECT_LT(e.size(), cap);
    EXPECT_TRUE(ValidJsonBody(e)) << "cap " << cap << ": " << e;
  }
  // Random bytes: always valid.
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int round = 0; round < 2000; ++round) {
    std::string s(size_t(round % 64), '\0');
    for (char& c : s) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      c = char(x);
    }
    EXPECT_TRUE(ValidJsonBody(Escaped(s, 16 + size_t(round % 200)))) << round;
  }
}

std::string TextEscaped(std::string_view s, size_t cap = 4096) {
  std::string out(cap, '\x01');
  size_t n = 0;
  AppendTextEscaped(s, out.data(), cap, &n);
  EXPECT_EQ(out[n], '\0');
  return out.substr(0, n);
}

// Text logs: a name a peer sent can never start a line of its own (issue 25).
TEST(LogTest, TextEscapesControlBytesAndBadUtf8) {
  EXPECT_EQ(TextEscaped("job x\n2026-01-01 forged"), "job x\\n2026-01-01 forged");
  EXPECT_EQ(TextEscaped(std::string("\r\x01\x1b[31m\x7f", 8)), "\\x0d\\x01\\x1b[31m\\x7f");
  EXPECT_EQ(TextEscaped("caf\xc3\xa9 \"q\" \\ ok"), "caf\xc3\xa9 \"q\" \\ ok") << "UTF-8 and quotes kept";
  EXPECT_EQ(TextEscaped("caf\xc3"), "caf\\xc3");
  EXPECT_EQ(TextEscaped("\xff\xfe"), "\\xff\\xfe");
  for (size_t cap = 1; cap < 20; ++cap) {
    const std::string e = TextEscaped("\n\x01\xff abc", cap);
    EXPECT_LT(e.size(), cap);
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace ferry
