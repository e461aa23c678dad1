// What this process may use of the machine: memory, from the container's limit when
// there is one (cgroup v2 memory.max, or v1 memory.limit_in_bytes) and the machine's
// physical memory otherwise. A pod's limit is far below the node's RAM, and a daemon
// that sized itself by the node would be OOM-killed instead of refusing work.
#ifndef FERRY_CORE_RESOURCES_H_
#define FERRY_CORE_RESOURCES_H_

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
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

}  // namespace ferry

#endif  // FERRY_CORE_RESOURCES_H_
