// The worker's cache of fetched bytes (lib/store/disk_cache.h): entries come back
// whole, a damaged file is a miss (and goes), the folder stays within its limit, least
// recently used first, and a restart finds what was there.
#include "store/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace ferry::store {
namespace {

// A folder of its own, removed at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/ferry-cache-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  operator const std::string&() const { return path; }
};

// Bytes of the regular files in `dir`, and their names.
uint64_t FolderBytes(const std::string& dir, std::vector<std::string>* names = nullptr) {
  uint64_t total = 0;
  DIR* d = ::opendir(dir.c_str());
  while (const dirent* e = ::readdir(d)) {
    struct stat st;
    const std::string path = dir + "/" + e->d_name;
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += uint64_t(st.st_size);
      if (names != nullptr) names->push_back(e->d_name);
    }
  }
  ::closedir(d);
  return total;
}

std::unique_ptr<DiskCache> OpenOk(const std::string& dir, uint64_t limit) {
  Result<std::unique_ptr<DiskCache>> c = DiskCache::Open(dir, limit);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(*c);
}

std::string Bytes(int i, size_t n) {
  std::string s(n, '\0');
  for (size_t k = 0; k < n; ++k) s[k] = char((k * 31 + size_t(i) * 7) & 0xff);
  return s;
}

TEST(DiskCacheTest, EntriesComeBackWholeAndSurviveARestart) {
  const TempDir tmp;
  const std::string& dir = tmp;
  {
    Result<std::unique_ptr<DiskCache>> c = DiskCache::Open(dir, 1 << 20);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    std::string out;
    EXPECT_FALSE((*c)->Get("s3://b/a.jpg#0+all", &out));
    (*c)->Put("s3://b/a.jpg#0+all", Bytes(1, 5000));
    (*c)->Put("s3://b/s.tar#512+300", Bytes(2, 300));
    (*c)->Put("s3://b/empty#0+all", "");
    ASSERT_TRUE((*c)->Get("s3://b/a.jpg#0+all", &out));
    EXPECT_EQ(out, Bytes(1, 5000));
    EXPECT_FALSE((*c)->Get("s3://b/s.tar#512+301", &out)) << "another range is another key";
    EXPECT_EQ((*c)->hits(), 1u);
  }
  Result<std::unique_ptr<DiskCache>> again = DiskCache::Open(dir, 1 << 20);
  ASSERT_TRUE(again.ok());
  std::string out;
  ASSERT_TRUE((*again)->Get("s3://b/s.tar#512+300", &out));
  EXPECT_EQ(out, Bytes(2, 300));
  ASSERT_TRUE((*again)->Get("s3://b/empty#0+all", &out));
  EXPECT_EQ(out, "");
  EXPECT_EQ((*again)->bytes(), FolderBytes(dir));
}

TEST(DiskCacheTest, ADamagedEntryIsAMissAndGoes) {
  const TempDir tmp;
  const std::string& dir = tmp;
  auto c = OpenOk(dir, 1 << 20);
  c->Put("k1", Bytes(1, 4000));
  c->Put("k2", Bytes(2, 4000));
  std::vector<std::string> names;
  FolderBytes(dir, &names);
  ASSERT_EQ(names.size(), 2u);
  // Flip a byte of each file's data and cut the other short: both are misses.
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string path = dir + "/" + names[i];
    if (i == 0) {
      const int fd = ::open(path.c_str(), O_RDWR);
      char b;
      ASSERT_EQ(::pread(fd, &b, 1, 3000), 1);
      b ^= 1;
      ASSERT_EQ(::pwrite(fd, &b, 1, 3000), 1);
      ::close(fd);
    } else {
      ASSERT_EQ(::truncate(path.c_str(), 100), 0);
    }
  }
  std::string out;
  EXPECT_FALSE(c->Get("k1", &out));
  EXPECT_FALSE(c->Get("k2", &out));
  EXPECT_EQ(FolderBytes(dir), 0u) << "damaged files are removed";
  EXPECT_EQ(c->bytes(), 0u);
  c->Put("k1", Bytes(1, 4000));
  ASSERT_TRUE(c->Get("k1", &out));
  EXPECT_EQ(out, Bytes(1, 4000));
}

TEST(DiskCacheTest, TheFolderStaysWithinItsLimitLeastRecentlyUsedFirst) {
  const TempDir tmp;
  const std::string& dir = tmp;
  const uint64_t limit = 100000;
  auto c = OpenOk(dir, limit);
  std::string out;
  for (int i = 0; i < 60; ++i) {
    c->Put("key-" + std::to_string(i), Bytes(i, 10000));
    ASSERT_TRUE(c->Get("key-0", &out)) << "used again each time: kept";
    EXPECT_LE(FolderBytes(dir), limit) << "after " << i;
  }
  EXPECT_EQ(out, Bytes(0, 10000));
  EXPECT_TRUE(c->Get("key-59", &out));
  EXPECT_FALSE(c->Get("key-1", &out)) << "the least recently used went";
  c->Put("huge", Bytes(9, limit + 1));
  EXPECT_FALSE(c->Get("huge", &out)) << "larger than the cache: not kept";
  EXPECT_LE(FolderBytes(dir), limit);
  // A smaller limit at the next start evicts down to it.
  auto small = OpenOk(dir, 30000);
  EXPECT_LE(FolderBytes(dir), 30000u);
  EXPECT_FALSE(DiskCache::Open("/proc/no/such/dir", 1000).ok());
  EXPECT_FALSE(DiskCache::Open(dir, 0).ok());
}

}  // namespace
}  // namespace ferry::store
