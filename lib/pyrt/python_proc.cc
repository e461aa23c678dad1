// PythonPool::Proc: one Python process's frames and its end (python_proc.h).
#include "pyrt/python_proc.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

namespace ferry {

using namespace pyrt_internal;  // NOLINT: the protocol's names

PythonPool::Proc::~Proc() {
  if (fd >= 0) close(fd);
  if (pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
}

Ended PythonPool::Proc::WaitReadable(Clock::time_point until, const std::atomic<bool>* cancel) {
  for (;;) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) return Ended::kCancelled;
    const auto now = Clock::now();
    if (now >= until) return Ended::kTimedOut;
    const int ms =
        int(std::min<int64_t>(250, std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1));
    struct pollfd p {fd, POLLIN, 0};
    const int r = poll(&p, 1, ms);
    if (r < 0 && errno != EINTR) return Ended::kEof;
    if (r > 0) return Ended::kNone;  // data, or a hang-up the read then sees
  }
}

std::string PythonPool::Proc::Reap() {
  if (pid <= 0) return "";
  int status = 0;
  const int r = waitpid(pid, &status, WNOHANG);
  if (r != pid) {
    // A closed socket from a process still running: end it.
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  pid = -1;
  return Describe(status);
}

std::string PythonPool::Proc::ReapWithin(double seconds) {
  const auto until = Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
  while (pid > 0 && Clock::now() < until) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      pid = -1;
      return Describe(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return Reap();
}

std::string PythonPool::Proc::Describe(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  if (WIFEXITED(status)) {
    switch (WEXITSTATUS(status)) {  // the child's own codes between fork and exec (Spawn)
      case 127: return "could not be executed";
      case 125: return "could not switch to --user-code-user's user";
      case 126: return "could not set up its descriptors";
    }
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  }
  return "ended";
}

Status PythonPool::Proc::Send(uint32_t kind, const std::string& json, std::string_view blob, int pass_fd) {
  uint32_t header[4] = {kMagic, kind, uint32_t(json.size()), uint32_t(blob.size())};
  struct iovec iov[3] = {{header, sizeof(header)},
                         {const_cast<char*>(json.data()), json.size()},
                         {const_cast<char*>(blob.data()), blob.size()}};
  size_t total = sizeof(header) + json.size() + blob.size(), done = 0;
  while (done < total) {
    // Skip what was written already.
    struct iovec cur[3];
    int n = 0;
    size_t skip = done;
    for (const iovec& v : iov) {
      if (skip >= v.iov_len) {
        skip -= v.iov_len;
        continue;
      }
      cur[n++] = {static_cast<char*>(v.iov_base) + skip, v.iov_len - skip};
      skip = 0;
    }
    struct msghdr m {};
    m.msg_iov = cur;
    m.msg_iovlen = size_t(n);
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (pass_fd >= 0 && done == 0) {  // with the frame's first byte
      m.msg_control = control;
      m.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    const ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::Unavailable(Errno("writing to the Python process"));
    }
    done += size_t(w);
  }
  return Status::OK();
}

Ended PythonPool::Proc::ReadExact(char* buf, size_t n, std::vector<int>* fds, Clock::time_point deadline,
                                   const std::atomic<bool>* cancel) {
  size_t got = 0;
  while (got < n) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) return Ended::kCancelled;
    const auto now = Clock::now();
    if (now >= deadline) return Ended::kTimedOut;
    const int ms = int(std::min<int64_t>(
        50, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
    struct pollfd p {fd, POLLIN, 0};
    const int r = poll(&p, 1, ms);
    if (r < 0 && errno != EINTR) return Ended::kEof;
    if (r <= 0) continue;
    struct iovec v {buf + got, n - got};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    struct msghdr m {};
    m.msg_iov = &v;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof(control);
    const ssize_t k = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (fds != nullptr) fds->push_back(f);
        else close(f);
      }
    }
    if (k <= 0) return Ended::kEof;
    got += size_t(k);
  }
  return Ended::kNone;
}

Ended PythonPool::Proc::Receive(Frame* f, Clock::time_point deadline, const std::atomic<bool>* cancel,
                                 std::string* error) {
  uint32_t header[4];
  Ended e = ReadExact(reinterpret_cast<char*>(header), sizeof(header), &f->fds, deadline, cancel);
  if (e != Ended::kNone) return e;
  if (header[0] != kMagic || header[2] > kMaxReplyJson || header[3] != 0) {
    *error = "the Python process sent a malformed frame";
    return Ended::kEof;
  }
  std::string json(header[2], '\0');
  // The rest of a frame follows at once: a process that stops mid-frame is dead.
  e = ReadExact(json.data(), json.size(), &f->fds, deadline, nullptr);
  if (e != Ended::kNone) return e;
  f->kind = header[1];
  f->meta = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (f->meta.is_discarded() || !f->meta.is_object()) {
    *error = "the Python process sent malformed JSON";
    return Ended::kEof;
  }
  return Ended::kNone;
}

}  // namespace ferry
