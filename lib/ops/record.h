// Draw recording: the random parameters ops draw, as torchvision's get_params would
// return them, for the tests that compare Ferry's distributions with torchvision's
// and for tools that show what a pipeline does to a sample. Off unless a DrawLog is
// installed on the thread (a thread_local pointer test: nothing on the hot path).
#ifndef FERRY_OPS_RECORD_H_
#define FERRY_OPS_RECORD_H_

#include <string>
#include <utility>
#include <vector>

namespace ferry {

struct DrawLog {
  std::vector<std::pair<std::string, double>> draws;  // (parameter, value) in draw order
};

inline DrawLog*& ThreadDrawLog() {
  thread_local DrawLog* log = nullptr;
  return log;
}

inline void RecordDraw(const char* name, double value) {
  if (DrawLog* log = ThreadDrawLog()) log->draws.emplace_back(name, value);
}

// Installs `log` on this thread for its lifetime.
class ScopedDrawLog {
 public:
  explicit ScopedDrawLog(DrawLog* log) : previous_(ThreadDrawLog()) { ThreadDrawLog() = log; }
  ~ScopedDrawLog() { ThreadDrawLog() = previous_; }
  ScopedDrawLog(const ScopedDrawLog&) = delete;
  ScopedDrawLog& operator=(const ScopedDrawLog&) = delete;

 private:
  DrawLog* previous_;
};

}  // namespace ferry

#endif  // FERRY_OPS_RECORD_H_
