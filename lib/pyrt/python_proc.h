// One Python process of a PythonPool (python_pool.h), and the protocol spoken with it
// (ferry/_user_worker.py's docstring has the frames). Internal to lib/pyrt.
#ifndef FERRY_PYRT_PYTHON_PROC_H_
#define FERRY_PYRT_PYTHON_PROC_H_

#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pyrt/python_pool.h"

namespace ferry {
namespace pyrt_internal {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x31595046;  // "FPY1"
enum Kind : uint32_t { kLoad = 1, kBatch = 2, kExit = 3, kLoaded = 11, kBatchOk = 13, kFailed = 14 };
constexpr size_t kProgressBytes = 4096;
constexpr size_t kReleasedOffset = 64;  // _user_worker.RELEASED
constexpr int kMaxBuffers = 64;         // _user_worker.MAX_BUFFERS
constexpr size_t kMaxReplyJson = size_t(64) << 20;
// Once a frame's first byte is in, the rest follows at once (a process that stops
// mid-frame is dead or broken).
constexpr double kFrameTimeoutS = 60.0;

inline Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

inline std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Why a wait for a process's frame ended without one.
enum class Ended { kNone, kEof, kCancelled, kTimedOut };

}  // namespace pyrt_internal

struct PythonPool::Proc {
  using Clock = pyrt_internal::Clock;
  using Ended = pyrt_internal::Ended;
  using Json = pyrt_internal::Json;

  int pid = -1;          // -1 once reaped
  int spawned_pid = -1;
  int fd = -1;
  // A page shared with the process (its fd 4): word 0 is the position, in the current
  // request, of the sample it is making (-1: none yet); bytes kReleased.. say which of
  // its batch buffers this side is done with (it sets 1, the process takes it back and
  // sets 0). Shared: a batch outlives its process's Proc.
  std::shared_ptr<void> page;
  std::atomic<int32_t>* progress = nullptr;
  std::deque<uint64_t> loaded;  // job keys, oldest first (the process keeps the last 8)
  // The structure of the process's last batch: a reply leaves it out while it repeats
  // (most batches of a job), so that neither side writes nor parses it again.
  std::string last_structure;
  // This side's mapping of each of the process's pooled batch buffers, kept while the
  // buffer stays the same file of the same size: a batch in buffer i maps nothing, and
  // its release unmaps nothing (both were most of the trainer's own CPU per batch
  // outside Python, with the page faults of reading a fresh mapping). Only the thread
  // that holds the process touches this; a batch holds its mapping (it outlives Proc).
  struct Mapping {
    void* addr = MAP_FAILED;
    size_t size = 0;
    dev_t dev = 0;
    ino_t ino = 0;
    ~Mapping() {
      if (addr != MAP_FAILED) munmap(addr, size);
    }
  };
  std::shared_ptr<Mapping> maps[pyrt_internal::kMaxBuffers];
  ~Proc();
  int32_t Progress() const { return progress != nullptr ? progress->load(std::memory_order_relaxed) : -1; }
  void ResetProgress() {
    if (progress != nullptr) progress->store(-1, std::memory_order_relaxed);
  }

  // Waits until a frame's first byte can be read (kNone), the process is gone (kEof:
  // poll reports a hang-up with nothing to read), `until`, or a cancel.
  Ended WaitReadable(Clock::time_point until, const std::atomic<bool>* cancel);

  bool Has(uint64_t key) const {
    for (uint64_t k : loaded)
      if (k == key) return true;
    return false;
  }
  // "exited with 3", "killed by signal 9", or "" when it is still running.
  std::string Reap();
  // Reap, after waiting up to `seconds` for a process that is ending by itself (one
  // that failed to start closes its socket as it exits).
  std::string ReapWithin(double seconds);
  static std::string Describe(int status);

  Status Send(uint32_t kind, const std::string& json, std::string_view blob = {}, int pass_fd = -1);

  // Reads exactly n bytes (and any fd passed with them) before `deadline`.
  Ended ReadExact(char* buf, size_t n, std::vector<int>* fds, Clock::time_point deadline,
                  const std::atomic<bool>* cancel);

  struct Frame {
    uint32_t kind = 0;
    Json meta;
    std::vector<int> fds;
    ~Frame() {
      for (int f : fds) close(f);
    }
  };

  Ended Receive(Frame* f, Clock::time_point deadline, const std::atomic<bool>* cancel, std::string* error);
};

}  // namespace ferry

#endif  // FERRY_PYRT_PYTHON_PROC_H_
