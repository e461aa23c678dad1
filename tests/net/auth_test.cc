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


std::string Hex(const std::string& bytes) {
  std::string hex;
  for (unsigned char c : bytes) {
    char buf[3];
    std::snprintf(buf, sizeof buf, "%02x", c);
    hex += buf;
  }
  return hex;
}

TEST(AuthTest, ProofsAreDeterministicAndCoverTokenRoleAndBothNonces) {
  const std::string ns = RandomNonce(), nc = RandomNonce();
  EXPECT_EQ(ns.size(), 32u);
  EXPECT_NE(ns, nc);
  const std::string mac = ClientProof("s3cret", 0, ns, nc);
  EXPECT_EQ(mac.size(), 32u);  // HMAC-SHA256
  EXPECT_EQ(ClientProof("s3cret", 0, ns, nc), mac);
  EXPECT_NE(ClientProof("s3cret!", 0, ns, nc), mac);
  EXPECT_NE(ClientProof("", 0, ns, nc), mac);
  EXPECT_NE(ClientProof("s3cret", 1, ns, nc), mac) << "the role is covered";
  EXPECT_NE(ClientProof("s3cret", 0, nc, ns), mac) << "each nonce in its place";
  std::string other = nc;
  other[31] ^= 1;
  EXPECT_NE(ClientProof("s3cret", 0, ns, other), mac);
  // The server's proof is not the client's: one reflected back is no proof.
  EXPECT_NE(ServerProof("s3cret", ns, nc), mac);
  EXPECT_NE(ServerProof("s3cret", ns, other), ServerProof("s3cret", ns, nc));
  // Known answers, as `printf 'ferry-hello-v2 client\x003:abc3:xyz' | openssl dgst
  // -sha256 -hmac key` (and the same for "server", without the role byte) compute them.
  EXPECT_EQ(Hex(ClientProof("key", 0, "abc", "xyz")),
            "029f9293ff266c4cb33e83fb75f54781cfb14a25234477e62f3d97611c36a417");
  EXPECT_EQ(Hex(ServerProof("key", "abc", "xyz")), "c826bf5bc51906171f418a03e91222034080e2c017dd4a87ba0db40000aa02e9");
  // Length-prefixed fields: moving a byte from one nonce to the other changes the proof.
  EXPECT_NE(ServerProof("key", "abcx", "yz"), ServerProof("key", "abc", "xyz"));
}

TEST(AuthTest, MacEquals) {
  const std::string a = ServerProof("t", "n", "m");
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
