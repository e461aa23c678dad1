// The one retry policy: how long to wait after a failure before trying again, and
// when to give up. Used by the client's worker streams and control loop and by the
// worker's dispatcher link, so that every reconnect in Ferry backs off the same way.
//
// Which failures to retry is the Status's call (Status::IsTransient: Unavailable and
// ResourceExhausted); this module decides only when.
#ifndef FERRY_NET_BACKOFF_H_
#define FERRY_NET_BACKOFF_H_

#include <algorithm>
#include <chrono>
#include <optional>

namespace ferry::net {

struct RetryPolicy {
  double initial_s = 0.1;     // the first delay
  double max_s = 2.0;         // delays double up to this
  int max_failures = -1;      // consecutive failures tolerated (0: give up at the first); < 0: never
  double give_up_after_s = 0; // or after failing for this long; <= 0: never
};

// Thread-compatible.
class Backoff {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Backoff(RetryPolicy policy) : p_(policy) {}

  // Records a failure. Returns how long to wait before the next attempt, or nullopt if
  // the policy says to give up.
  std::optional<std::chrono::milliseconds> Failed(Clock::time_point now = Clock::now()) {
    if (failures_ == 0) first_failure_ = now;
    ++failures_;
    if (p_.max_failures >= 0 && failures_ > p_.max_failures) return std::nullopt;
    if (p_.give_up_after_s > 0 && now - first_failure_ > std::chrono::duration<double>(p_.give_up_after_s))
      return std::nullopt;
    double delay = p_.initial_s;
    for (int i = 1; i < failures_ && delay < p_.max_s; ++i) delay *= 2;
    return std::chrono::milliseconds(int64_t(std::min(delay, p_.max_s) * 1000));
  }
  // Progress: the next failure starts over from the initial delay.
  void Succeeded() { failures_ = 0; }
  int failures() const { return failures_; }

 private:
  const RetryPolicy p_;
  int failures_ = 0;
  Clock::time_point first_failure_{};
};

}  // namespace ferry::net

#endif  // FERRY_NET_BACKOFF_H_
