// What this process may use of the machine: memory, from the container's limit when
// there is one (cgroup v2 memory.max, or v1 memory.limit_in_bytes) and the machine's
// physical memory otherwise; CPUs, from its affinity and CPU quota. A pod's limit is far below the node's RAM, and a daemon
// that sized itself by the node would be OOM-killed instead of refusing work.
#ifndef FERRY_CORE_RESOURCES_H_
#define FERRY_CORE_RESOURCES_H_

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace ferry {

inline uint64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

// The container's memory limit; 0 when there is none ("max", or a v1 limit of about
// 2^63 meaning unlimited) or it cannot be read.
inline uint64_t CgroupMemoryLimitBytes() {
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string v;
    if (!(in >> v) || v == "max") continue;
    try {
      const uint64_t n = std::stoull(v);
      if (n > 0 && n < (uint64_t(1) << 60)) return n;
    } catch (...) {
    }
  }
  return 0;
}

// min(physical memory, the container's limit); 0 if neither is known.
inline uint64_t MemoryLimitBytes() {
  const uint64_t phys = PhysicalMemoryBytes(), cg = CgroupMemoryLimitBytes();
  if (phys == 0) return cg;
  return cg == 0 ? phys : std::min(phys, cg);
}

// CPUs a CPU quota allows: cgroup v2's cpu.max ("max 100000", or "<quota> <period>"
// in microseconds), rounded down, at least 1; 0 when there is no quota or the text is
// not one.
inline int CpusOfCpuMax(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return 0;
  try {
    const long long q = std::stoll(quota);
    if (q <= 0) return 0;
    return int(std::max<long long>(1, q / period));
  } catch (...) {
    return 0;
  }
}

// CPUs this process may use: its CPU affinity (taskset, a cpuset), capped by its
// cgroup's CPU quota (a pod's CPU limit), at least 1. Not hardware_concurrency(), which
// counts the node's CPUs: a daemon in a 4-CPU pod on a 96-CPU node must not start 96
// decode threads.
inline int AvailableCpus() {
  int n = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
  if (n <= 0) n = int(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  int quota = 0;
  {
    std::ifstream in("/sys/fs/cgroup/cpu.max");  // v2
    std::string line;
    if (std::getline(in, line)) quota = CpusOfCpuMax(line);
  }
  if (quota == 0) {  // v1
    std::ifstream q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    std::string qs, ps;
    if (q >> qs && p >> ps) quota = CpusOfCpuMax(qs + " " + ps);
  }
  return quota > 0 ? std::min(n, quota) : n;
}

}  // namespace ferry

#endif  // FERRY_CORE_RESOURCES_H_
