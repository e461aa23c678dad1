// CPU lists ("0-3,8,10-11", as taskset -c, cpuset.cpus and /sys/devices/system/cpu/online
// write them) and pinning a thread to one: how a trainer keeps Ferry's receiving threads
// off the cores its own step runs on (ClientOptions::io_cpus, $FERRY_IO_CPUS).
#ifndef FERRY_CORE_CPU_SET_H_
#define FERRY_CORE_CPU_SET_H_

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/log.h"
#include "ferry/status.h"

namespace ferry {

// "0-3,8" -> {0, 1, 2, 3, 8}: sorted, each once. Spaces around the items are allowed;
// an empty list, a reversed range or a CPU past CPU_SETSIZE is InvalidArgument.
inline Result<std::vector<int>> ParseCpuList(std::string_view s) {
  std::vector<int> cpus;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("CPU list '" + std::string(s) + "': " + why +
                                   " (write it as taskset -c does: 0-3,8)");
  };
  size_t i = 0;
  auto skip_space = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) ++i;
  };
  auto number = [&](int* out) {
    skip_space();
    const size_t start = i;
    long v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9' && v < CPU_SETSIZE) v = v * 10 + (s[i++] - '0');
    if (i == start) return false;
    *out = int(v);
    skip_space();
    return true;
  };
  for (;;) {
    int a = 0, b = 0;
    if (!number(&a)) return bad("expected a CPU number at offset " + std::to_string(i));
    b = a;
    if (i < s.size() && s[i] == '-') {
      ++i;
      if (!number(&b)) return bad("expected the end of a range at offset " + std::to_string(i));
    }
    if (b < a) return bad("a range ends before it starts");
    if (b >= CPU_SETSIZE) return bad("CPU " + std::to_string(b) + " is past the largest this system numbers (" +
                                     std::to_string(CPU_SETSIZE - 1) + ")");
    for (int c = a; c <= b; ++c) cpus.push_back(c);
    if (i == s.size()) break;
    if (s[i] != ',') return bad(std::string("unexpected '") + s[i] + "' at offset " + std::to_string(i));
    ++i;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

inline std::string CpuListString(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

// The CPUs this process may be placed on: its cgroup's cpuset when it has one (a
// container's), else the online CPUs. Not the calling thread's affinity: a trainer that
// pinned its own thread to one core may still place Ferry's threads on others.
inline std::vector<int> PlaceableCpus() {
  for (const char* path : {"/sys/fs/cgroup/cpuset.cpus.effective", "/sys/fs/cgroup/cpuset/cpuset.effective_cpus",
                           "/sys/devices/system/cpu/online"}) {
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line) || line.empty()) continue;
    Result<std::vector<int>> got = ParseCpuList(line);
    if (got.ok() && !got->empty()) return *got;
  }
  return {};
}

// OK when every CPU of `cpus` can hold a thread of this process (see PlaceableCpus).
inline Status CheckPlaceable(const std::vector<int>& cpus, const std::string& what) {
  if (cpus.empty()) return Status::OK();
  const std::vector<int> placeable = PlaceableCpus();
  if (placeable.empty()) return Status::OK();  // nothing to check against: the pinning itself reports
  for (int c : cpus) {
    if (!std::binary_search(placeable.begin(), placeable.end(), c))
      return Status::InvalidArgument(what + ": CPU " + std::to_string(c) + " is not one this process can use (" +
                                     CpuListString(placeable) + ")");
  }
  return Status::OK();
}

// Pins the calling thread to `cpus` (nothing to do when empty).
inline Status PinThisThread(const std::vector<int>& cpus) {
  if (cpus.empty()) return Status::OK();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  const int err = ::pthread_setaffinity_np(::pthread_self(), sizeof set, &set);
  if (err != 0)
    return Status::Internal("pinning a thread to CPUs " + CpuListString(cpus) + ": " + std::strerror(err));
  return Status::OK();
}

// PinThisThread for a thread that goes on either way: a failure is logged once per
// thread (the thread then runs where it started).
inline void PinThisThreadOrWarn(const std::vector<int>& cpus, const char* what) {
  if (Status s = PinThisThread(cpus); !s.ok()) LogWarn("%s thread: %s", what, s.message().c_str());
}

}  // namespace ferry

#endif  // FERRY_CORE_CPU_SET_H_
