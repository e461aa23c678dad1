// Authentication helpers (lib/net/auth.h): the MAC, constant-time comparison, and
// where the token comes from.
#include "net/auth.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "testutil.h"

namespace ferry::net {
namespace {

using ::ferry::testing::TempDir;
using ::ferry::testing::WriteFile;


TEST(AuthTest, HelloMacIsDeterministicAndSensitive) {
  const std::string nonce = RandomNonce();
  EXPECT_EQ(nonce.size(), 32u);
  EXPECT_NE(RandomNonce(), nonce);
  const std::string mac = HelloMac("s3cret", nonce);
  EXPECT_EQ(mac.size(), 32u);  // HMAC-SHA256
  EXPECT_EQ(HelloMac("s3cret", nonce), mac);
  EXPECT_NE(HelloMac("s3cret!", nonce), mac);
  EXPECT_NE(HelloMac("S3cret", nonce), mac);
  EXPECT_NE(HelloMac("", nonce), mac);
  std::string other = nonce;
  other[31] ^= 1;
  EXPECT_NE(HelloMac("s3cret", other), mac);
  // A known answer: HMAC-SHA256(key "key", message "ferry-hello-v1" "abc"), as
  // `printf ferry-hello-v1abc | openssl dgst -sha256 -hmac key` computes it.
  std::string hex;
  for (unsigned char c : HelloMac("key", "abc")) {
    char buf[3];
    std::snprintf(buf, sizeof buf, "%02x", c);
    hex += buf;
  }
  EXPECT_EQ(hex, "420408a8445699df20fba5cd87e4752bd5e6d3a14aced3045be4ef8708cfdda3");
  // Domain separation: the MAC covers the protocol label, not just the nonce.
  EXPECT_NE(HelloMac("key", "abc"), HelloMac("key", "ferry-hello-v1abc"));
}

TEST(AuthTest, MacEquals) {
  const std::string a = HelloMac("t", "n");
  EXPECT_TRUE(MacEquals(a, a));
  EXPECT_TRUE(MacEquals("", ""));
  std::string b = a;
  b[0] ^= 0x80;
  EXPECT_FALSE(MacEquals(a, b));
  b = a;
  b[31] ^= 1;
  EXPECT_FALSE(MacEquals(a, b));
  EXPECT_FALSE(MacEquals(a, a.substr(0, 31)));
  EXPECT_FALSE(MacEquals(a, ""));
  EXPECT_FALSE(MacEquals("", a));
  EXPECT_FALSE(MacEquals(a, a + '\0'));
}

class TokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("FERRY_TOKEN");
    had_env_ = old != nullptr;
    if (had_env_) old_env_ = old;
    unsetenv("FERRY_TOKEN");
  }
  void TearDown() override {
    if (had_env_) {
      setenv("FERRY_TOKEN", old_env_.c_str(), 1);
    } else {
      unsetenv("FERRY_TOKEN");
    }
  }
  TempDir dir_;
  bool had_env_ = false;
  std::string old_env_;
};

TEST_F(TokenTest, FromFileWithTrailingWhitespaceTrimmed) {
  WriteFile(dir_ / "token", "s3cret\n");
  Result<std::string> t = LoadToken(dir_ / "token");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, "s3cret");
  WriteFile(dir_ / "token2", "two words \r\n\t\n");
  t = LoadToken(dir_ / "token2");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "two words");
  // The file wins over the environment.
  setenv("FERRY_TOKEN", "from-env", 1);
  t = LoadToken(dir_ / "token");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "s3cret");
}

TEST_F(TokenTest, FromEnvironment) {
  Result<std::string> t = LoadToken("");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "") << "no file and no FERRY_TOKEN: no authentication";
  setenv("FERRY_TOKEN", "from-env", 1);
  t = LoadToken("");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "from-env");
}

TEST_F(TokenTest, EmptyFileIsAnError) {
  WriteFile(dir_ / "empty", "");
  Result<std::string> t = LoadToken(dir_ / "empty");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("empty"), std::string::npos);
  WriteFile(dir_ / "blank", " \n\n");
  EXPECT_FALSE(LoadToken(dir_ / "blank").ok());
}

TEST_F(TokenTest, MissingFileIsNotFound) {
  Result<std::string> t = LoadToken(dir_ / "no-such-file");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("no-such-file"), std::string::npos);
}

}  // namespace
}  // namespace ferry::net
