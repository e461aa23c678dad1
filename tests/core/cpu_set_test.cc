// CPU lists and thread pinning (lib/core/cpu_set.h): ClientOptions::io_cpus and
// $FERRY_IO_CPUS are read by these.
#include "core/cpu_set.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <thread>

namespace ferry {
namespace {

TEST(CpuSetTest, ListsAreReadAsTasksetWritesThem) {
  EXPECT_EQ(*ParseCpuList("0"), (std::vector<int>{0}));
  EXPECT_EQ(*ParseCpuList("0-3,8"), (std::vector<int>{0, 1, 2, 3, 8}));
  EXPECT_EQ(*ParseCpuList(" 8 , 2-3 ,2\n"), (std::vector<int>{2, 3, 8})) << "sorted, each once, spaces allowed";
  EXPECT_EQ(CpuListString({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(CpuListString(*ParseCpuList("5,1-2")), "1-2,5");
  for (const char* bad : {"", ",", "1,", "a", "3-1", "1-", "-1", "0;1", "1 2", "99999", "0-99999"}) {
    Result<std::vector<int>> got = ParseCpuList(bad);
    EXPECT_FALSE(got.ok()) << "'" << bad << "'";
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(got.status().message().find("taskset -c"), std::string::npos) << got.status().ToString();
    }
  }
}

TEST(CpuSetTest, APinnedThreadRunsOnlyOnItsCpus) {
  const std::vector<int> placeable = PlaceableCpus();
  ASSERT_FALSE(placeable.empty());
  EXPECT_TRUE(CheckPlaceable({placeable.back()}, "io_cpus").ok());
  Status far = CheckPlaceable({CPU_SETSIZE - 1}, "io_cpus");
  ASSERT_FALSE(far.ok()) << "a CPU this machine does not have";
  EXPECT_NE(far.message().find("io_cpus: CPU"), std::string::npos) << far.ToString();

  // The caller pinned to its first CPU (a trainer's thread): a thread pinned by
  // PinThisThread to another one runs there, whatever the creator's affinity.
  cpu_set_t saved;
  ASSERT_EQ(::sched_getaffinity(0, sizeof saved, &saved), 0);
  const int last = placeable.back();
  cpu_set_t first;
  CPU_ZERO(&first);
  CPU_SET(placeable.front(), &first);
  ASSERT_EQ(::sched_setaffinity(0, sizeof first, &first), 0);
  std::vector<int> seen;
  int count = -1;
  std::thread t([&] {
    ASSERT_TRUE(PinThisThread({last}).ok());
    cpu_set_t mine;
    ASSERT_EQ(::sched_getaffinity(0, sizeof mine, &mine), 0);
    count = CPU_COUNT(&mine);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &mine)) seen.push_back(c);
  });
  t.join();
  ASSERT_EQ(::sched_setaffinity(0, sizeof saved, &saved), 0);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(seen, (std::vector<int>{last}));
  EXPECT_TRUE(PinThisThread({}).ok()) << "nothing to pin";
}

}  // namespace
}  // namespace ferry
