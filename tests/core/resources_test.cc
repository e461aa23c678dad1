// What a process may use (lib/core/resources.h): a pod's CPU quota caps the decode
// threads a daemon starts by default, whatever the node's CPU count.
#include "core/resources.h"

#include <gtest/gtest.h>
#include <sched.h>

namespace ferry {
namespace {

TEST(ResourcesTest, CpuMaxIsReadAsWholeCpus) {
  EXPECT_EQ(CpusOfCpuMax("max 100000"), 0) << "no quota";
  EXPECT_EQ(CpusOfCpuMax("400000 100000"), 4);
  EXPECT_EQ(CpusOfCpuMax("250000 100000\n"), 2) << "2.5 CPUs: 2 threads";
  EXPECT_EQ(CpusOfCpuMax("50000 100000"), 1) << "half a CPU: still 1";
  EXPECT_EQ(CpusOfCpuMax("-1 100000"), 0) << "cgroup v1's unlimited";
  EXPECT_EQ(CpusOfCpuMax(""), 0);
  EXPECT_EQ(CpusOfCpuMax("lots 100000"), 0);
  EXPECT_EQ(CpusOfCpuMax("100000 0"), 0);
}

TEST(ResourcesTest, AvailableCpusFollowsTheAffinity) {
  cpu_set_t all;
  ASSERT_EQ(::sched_getaffinity(0, sizeof all, &all), 0);
  const int before = AvailableCpus();
  EXPECT_GE(before, 1);
  EXPECT_LE(before, CPU_COUNT(&all));
  // Pinned to one CPU (taskset -c 0, a cpuset of one): one.
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  const int pinned = AvailableCpus();
  ASSERT_EQ(::sched_setaffinity(0, sizeof all, &all), 0);
  EXPECT_EQ(pinned, 1);
}

}  // namespace
}  // namespace ferry
