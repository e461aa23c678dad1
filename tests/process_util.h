// Helpers for tests that run Ferry's real processes (cluster_test, chaos_test): a
// child process with its output in files, a free port, and the exactly-once check of
// a --dump-indices file.
#ifndef FERRY_TESTS_PROCESS_UTIL_H_
#define FERRY_TESTS_PROCESS_UTIL_H_

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "testutil.h"

namespace ferry::testing {

// A child process whose stdout and stderr go to files. Killed (SIGKILL) and reaped
// when the object dies, unless it was waited for.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& out, const std::string& err)
      : out_(out), err_(err) {
    // Everything the child needs is prepared before fork(): the test program has
    // threads, so the child may only call async-signal-safe functions.
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "FERRY_TOKEN=", 12) != 0) env_strings.push_back(*e);  // tests choose tokens
    }
    std::vector<char*> env;
    for (std::string& e : env_strings) env.push_back(e.data());
    env.push_back(nullptr);
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    EXPECT_GE(out_fd, 0);
    EXPECT_GE(err_fd, 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out_fd, STDOUT_FILENO);
      ::dup2(err_fd, STDERR_FILENO);
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
      ::execve(args[0], args.data(), env.data());
      ::_exit(127);
    }
    ::close(out_fd);
    ::close(err_fd);
    EXPECT_GT(pid_, 0);
  }
  ~Child() { Kill(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  std::string out() const { return ReadFile(out_); }
  std::string err() const { return ReadFile(err_); }

  void Signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  // SIGSTOP, and waits until the child has stopped: true, or false if it had exited.
  bool Stop() {
    if (pid_ <= 0) return false;
    ::kill(pid_, SIGSTOP);
    int status = 0;
    if (::waitpid(pid_, &status, WUNTRACED) != pid_) return false;
    if (WIFSTOPPED(status)) return true;
    pid_ = -1;  // reaped
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
    return false;
  }

  // The exit code (128 + signal if killed by one), or nullopt if it still runs after
  // `seconds`.
  std::optional<int> Wait(double seconds) {
    if (pid_ <= 0) return status_;
    int status = 0;
    const bool done = WaitFor(
        [&] {
          const pid_t r = ::waitpid(pid_, &status, WNOHANG);
          return r == pid_ || r < 0;
        },
        seconds);
    if (!done) return std::nullopt;
    pid_ = -1;
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
    return status_;
  }

  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::kill(pid_, SIGCONT);  // in case it was stopped
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    status_ = 128 + SIGKILL;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string out_, err_;
};

// Waits (up to 20 s) for a daemon's "listening on HOST:PORT" line on stdout; returns
// the address, or "" (with a test failure naming `what`) if it never came.
inline std::string WaitForListening(const Child& c, const std::string& what) {
  std::string addr;
  const bool up = WaitFor(
      [&] {
        const std::string out = c.out();
        const size_t at = out.find("listening on ");
        const size_t end = out.find('\n', at);
        if (at == std::string::npos || end == std::string::npos) return false;
        addr = out.substr(at + 13, end - at - 13);
        return true;
      },
      20);
  EXPECT_TRUE(up) << what << " did not start: " << c.err();
  return addr;
}

// A port that was free a moment ago (the kernel's choice for port 0).
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(line);
  return out;
}

// Every index in [0, n) exactly once in a --dump-indices file.
inline void ExpectEachIndexOnce(const std::string& dump, int64_t n) {
  std::vector<int64_t> got;
  for (const std::string& l : Lines(dump)) got.push_back(std::stoll(l));
  std::sort(got.begin(), got.end());
  std::vector<int64_t> want(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) want[size_t(i)] = i;
  EXPECT_EQ(got.size(), want.size());
  std::vector<int64_t> missing, repeated;
  std::set_difference(want.begin(), want.end(), got.begin(), got.end(), std::back_inserter(missing));
  for (size_t i = 1; i < got.size(); ++i)
    if (got[i] == got[i - 1]) repeated.push_back(got[i]);
  EXPECT_TRUE(missing.empty()) << missing.size() << " indices missing, e.g. "
                               << (missing.empty() ? -1 : missing[0]);
  EXPECT_TRUE(repeated.empty()) << repeated.size() << " indices repeated, e.g. "
                                << (repeated.empty() ? -1 : repeated[0]);
}


}  // namespace ferry::testing

#endif  // FERRY_TESTS_PROCESS_UTIL_H_
