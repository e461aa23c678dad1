#include "pyrt/python_pool.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <new>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/hash.h"
#include "core/log.h"
#include "core/philox.h"
#include "data/job_listing.h"
#include "pyrt/python_proc.h"

extern char** environ;

namespace ferry {

namespace {

using namespace pyrt_internal;  // NOLINT: the process protocol's names (python_proc.h)

constexpr uint32_t kPurposeUserCode = 0x55;  // the 4th Philox word's purpose byte ('U'): no op uses it
constexpr int kMaxJobsPerProcess = 8;        // _user_worker.MAX_JOBS
// A sample stuck where SIGALRM does not reach (C code) is given this long past the
// timeout before its process is killed.
constexpr double kWatchdogGraceS = 2.0;
// A process answers Load within this (importing torch takes seconds on a busy node).
constexpr double kLoadTimeoutS = 120.0;

}  // namespace

const std::string& UserWorkerScript();  // user_worker_script.cc (generated)

PythonPool::PythonPool(PythonPoolOptions options) : o_(std::move(options)) {}

PythonPool::~PythonPool() {
  std::vector<std::shared_ptr<Proc>> idle;
  {
    MutexLock lock(&mu_);
    idle.swap(idle_);
  }
  for (auto& p : idle) static_cast<void>(p->Send(kExit, "{}"));  // then ~Proc ends it (a dead one: no matter)
}

uint64_t PythonPool::SampleSeed(uint64_t job_seed, uint64_t epoch, int64_t index) {
  SampleRng rng(job_seed, epoch, uint64_t(index), kPurposeUserCode);
  // 63 bits: random.seed and torch.manual_seed take it whole, numpy its low 32 bits.
  return rng.NextU64() >> 1;
}

int64_t PythonPool::started() const {
  MutexLock lock(&mu_);
  return started_;
}

std::vector<int> PythonPool::pids() const {
  MutexLock lock(&mu_);
  return pids_;
}

Result<std::shared_ptr<PythonPool::Proc>> PythonPool::Spawn() {
  // Everything the child needs is prepared here: between fork and exec only
  // async-signal-safe calls (the worker has many threads).
  uid_t uid = 0;
  gid_t gid = 0;
  const bool drop = !o_.user.empty();
  if (drop) {
    struct passwd pw, *res = nullptr;
    std::vector<char> buf(16384);
    if (getpwnam_r(o_.user.c_str(), &pw, buf.data(), buf.size(), &res) != 0 || res == nullptr)
      return Status::InvalidArgument("--user-code-user: no user named " + o_.user);
    uid = pw.pw_uid;
    gid = pw.pw_gid;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return Status::Unavailable(Errno("socketpair"));
  const int progress_fd = memfd_create("ferry-progress", MFD_CLOEXEC);
  if (progress_fd < 0 || ftruncate(progress_fd, kProgressBytes) != 0) {
    if (progress_fd >= 0) close(progress_fd);
    close(sv[0]);
    close(sv[1]);
    return Status::Unavailable(Errno("the progress page"));
  }
  void* page = mmap(nullptr, kProgressBytes, PROT_READ | PROT_WRITE, MAP_SHARED, progress_fd, 0);
  if (page == MAP_FAILED) {
    close(progress_fd);
    close(sv[0]);
    close(sv[1]);
    return Status::Unavailable(Errno("mapping the progress page"));
  }
  auto* progress = new (page) std::atomic<int32_t>(-1);
  std::shared_ptr<void> shared_page(page, [](void* q) { munmap(q, kProgressBytes); });
  const std::string& script = UserWorkerScript();
  std::string fd_arg = "3", progress_arg = "4";
  std::vector<char*> argv = {const_cast<char*>(o_.python.c_str()), const_cast<char*>("-c"),
                             const_cast<char*>(script.c_str()), fd_arg.data(), progress_arg.data(), nullptr};
  const pid_t pid = fork();
  if (pid < 0) {
    munmap(page, kProgressBytes);
    close(progress_fd);
    close(sv[0]);
    close(sv[1]);
    return Status::Unavailable(Errno("fork"));
  }
  if (pid == 0) {
    // The socket to fd 3, the progress page to fd 4 (each first moved above 4, so
    // that neither dup2 closes the other's source).
    const int sock = fcntl(sv[1], F_DUPFD_CLOEXEC, 10), prog = fcntl(progress_fd, F_DUPFD_CLOEXEC, 10);
    if (sock < 0 || prog < 0 || dup2(sock, 3) != 3 || dup2(prog, 4) != 4) _exit(126);
    if (drop) {
      if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0) _exit(125);
    }
    signal(SIGPIPE, SIG_DFL);
    execve(argv[0], argv.data(), environ);
    _exit(127);
  }
  close(sv[1]);
  close(progress_fd);
  auto p = std::make_shared<Proc>();
  p->progress = progress;
  p->page = std::move(shared_page);
  p->pid = pid;
  p->spawned_pid = pid;
  p->fd = sv[0];
  MutexLock lock(&mu_);
  ++started_;
  pids_.push_back(pid);
  return p;
}

std::shared_ptr<PythonPool::Proc> PythonPool::Acquire(const std::atomic<bool>* cancel) {
  MutexLock lock(&mu_);
  for (;;) {
    if (cancel != nullptr && cancel->load()) return nullptr;
    if (!idle_.empty()) {
      std::shared_ptr<Proc> p = std::move(idle_.back());
      idle_.pop_back();
      return p;
    }
    if (live_ < std::max(1, o_.processes)) {
      ++live_;
      mu_.Unlock();
      Result<std::shared_ptr<Proc>> p = Spawn();
      mu_.Lock();
      if (p.ok()) return *p;
      --live_;
      LogWarn("user code: cannot start a Python process: %s", p.status().ToString().c_str());
      cv_.WaitFor(&mu_, 1.0);
      continue;
    }
    cv_.WaitFor(&mu_, 0.05);
  }
}

void PythonPool::Warm() {
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (live_ >= std::max(1, o_.processes)) return;
      ++live_;
    }
    Result<std::shared_ptr<Proc>> p = Spawn();
    MutexLock lock(&mu_);
    if (!p.ok()) {
      --live_;
      LogWarn("user code: cannot start a Python process: %s", p.status().ToString().c_str());
      return;
    }
    idle_.push_back(std::move(*p));
    cv_.Signal();
  }
}

// A live process goes back to the idle ones; a dead one (fd closed) is discarded
// (~Proc kills and reaps what is left of it).
void PythonPool::Release(std::shared_ptr<Proc> p) {
  {
    MutexLock lock(&mu_);
    if (p->fd >= 0 && p->pid > 0) {
      idle_.push_back(std::move(p));
    } else {
      for (auto it = pids_.begin(); it != pids_.end(); ++it)
        if (*it == p->spawned_pid) {
          pids_.erase(it);
          break;
        }
      --live_;
    }
    cv_.Signal();
  }
  p.reset();  // outside the lock: a kill and a wait
}

namespace {


std::string KeyHex(uint64_t key) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)key);
  return buf;
}

}  // namespace

uint64_t PythonPool::CodeKey(const JobSpec& job) {
  Fingerprinter f;
  f.Add(job.user_code.payload);
  return f.Finish() | 1;  // never 0 (MakeBatch's "compute it")
}

namespace {

// "cloudpickle 3.1.3 on the trainer, 2.2.0 here, ...": the trainer's versions (the job
// records them) that this Python's differ from; "" when none does.
std::string VersionDiff(const Json& mine, const std::string& trainers) {
  const Json theirs = Json::parse(trainers, nullptr, false);
  if (!mine.is_object() || !theirs.is_object()) return "";
  std::string diff;
  for (auto it = theirs.begin(); it != theirs.end(); ++it) {
    if (!it.value().is_string()) continue;
    const std::string have =
        mine.contains(it.key()) && mine[it.key()].is_string() ? mine[it.key()].get<std::string>() : "(none)";
    if (have != it.value().get<std::string>())
      diff += (diff.empty() ? "" : ", ") + it.key() + " " + it.value().get<std::string>() + " on the trainer, " + have +
              " here";
  }
  return diff;
}

}  // namespace

Status PythonPool::Load(Proc* p, const JobSpec& job, uint64_t key, std::string* versions) {
  Json meta = {{"key", KeyHex(key)}, {"input", job.user_code.input}};
  // A process that could not start (no such interpreter, one --user-code-user cannot
  // run) is a setting to fix, not a fault to retry: said as such, by how it ended.
  auto startup = [](const std::string& how) {
    return how == "could not be executed" || how == "could not switch to --user-code-user's user";
  };
  auto ended = [&](const std::string& how, const std::string& detail) {
    close(p->fd);
    p->fd = -1;  // dead: the caller discards it
    const bool config = startup(how);
    const std::string msg = "user code: the Python process (" + o_.python + ") " + (how.empty() ? "failed" : how) +
                            (config ? " (check --python, and that --user-code-user's user can read and run it)"
                                    : detail) +
                            " while loading the job's code";
    return config ? Status::FailedPrecondition(msg) : Status::Unavailable(msg);
  };
  if (Status sent = p->Send(kLoad, meta.dump(), job.user_code.payload); !sent.ok())
    return ended(p->ReapWithin(1.0), " (" + sent.message() + ")");
  Proc::Frame f;
  std::string error;
  const Ended e = p->Receive(&f, Clock::now() + Seconds(kLoadTimeoutS), nullptr, &error);
  if (e != Ended::kNone || f.kind != kLoaded) {
    if (e == Ended::kTimedOut) {
      kill(p->pid, SIGKILL);
      p->Reap();
      return ended("did not answer within " + std::to_string(int(kLoadTimeoutS)) + " s", "");
    }
    const std::string how = p->ReapWithin(1.0);
    return ended(startup(how) || error.empty() ? how : error, "");
  }
  if (!f.meta.value("ok", false)) {
    std::string msg = f.meta.value("error", std::string("?"));
    std::string module;
    if (f.meta.contains("module") && f.meta["module"].is_string()) module = f.meta["module"].get<std::string>();
    // A pickle of one cloudpickle or torch often fails to load in another: say so.
    const std::string diff =
        f.meta.contains("versions") ? VersionDiff(f.meta["versions"], job.user_code.versions) : std::string();
    return Status::FailedPrecondition(
        "user code cannot be loaded on this worker: " + msg +
        (module.empty() ? std::string()
                        : " (install module '" + module + "' where the workers run: the same image as the trainer)") +
        (diff.empty() ? std::string()
                      : "; the worker's Python (" + o_.python + ") differs from the trainer's: " + diff +
                            " (run the workers from the trainer's image, or point --python at the same environment)"));
  }
  if (versions != nullptr && f.meta.contains("versions")) *versions = f.meta["versions"].dump();
  p->loaded.push_back(key);
  while (p->loaded.size() > size_t(kMaxJobsPerProcess)) p->loaded.pop_front();
  return Status::OK();
}

Status PythonPool::Check(const JobSpec& job, std::string* warning) {
  if (warning != nullptr) warning->clear();
  std::shared_ptr<Proc> p = Acquire(nullptr);
  std::string versions;
  const uint64_t key = CodeKey(job);
  Status st = Load(p.get(), job, key, &versions);
  Release(std::move(p));  // a dead one is discarded
  if (!st.ok() || warning == nullptr) return st;
  // The trainer's versions against this Python's: a difference is worth a warning
  // (pickles of one torch may not load, or behave the same, in another).
  *warning = VersionDiff(Json::parse(versions, nullptr, false), job.user_code.versions);
  return st;
}

Result<UserBatch> PythonPool::MakeBatch(const JobSpec& job, uint64_t epoch, const std::vector<int64_t>& samples,
                                        int64_t rows, const std::atomic<bool>* cancel, const NativeRows* native,
                                        uint64_t key) {
  if (key == 0) key = CodeKey(job);
  UserBatch out;
  // The native rows go to the process as a memfd (one copy; the process maps it).
  int native_fd = -1;
  if (native != nullptr) {
    if (native->rows != int64_t(samples.size())) return Status::Internal("user code: native rows do not match");
    native_fd = memfd_create("ferry-native-rows", MFD_CLOEXEC);
    if (native_fd < 0) return Status::ResourceExhausted(Errno("memfd_create"));
    const size_t bytes = native->row_bytes * size_t(native->rows);
    if (bytes > 0) {
      if (ftruncate(native_fd, off_t(bytes)) != 0) {
        close(native_fd);
        return Status::ResourceExhausted(Errno("sizing the native rows"));
      }
      void* m = mmap(nullptr, bytes, PROT_WRITE, MAP_SHARED, native_fd, 0);
      if (m == MAP_FAILED) {
        close(native_fd);
        return Status::ResourceExhausted(Errno("mapping the native rows"));
      }
      std::memcpy(m, native->images, bytes);
      munmap(m, bytes);
    }
  }
  struct CloseFd {
    int fd;
    ~CloseFd() {
      if (fd >= 0) close(fd);
    }
  } close_native{native_fd};
  // Positions (into `samples`) left out: by the code's own exceptions, reported in the
  // reply; or decided here (a watchdog kill, a process that died twice on a sample).
  std::map<size_t, std::string> dropped;
  std::map<size_t, int> deaths;
  int failures = 0;
  for (;;) {
    std::vector<size_t> positions;  // of this try's request
    for (size_t i = 0; i < samples.size(); ++i)
      if (!dropped.count(i)) positions.push_back(i);
    std::shared_ptr<Proc> p = Acquire(cancel);
    if (p == nullptr) return Status::Cancelled("stopped");
    std::string why;  // why the process ended, if it did
    int32_t step = -1;  // the request's position being made
    bool timed_out = false;
    if (!p->Has(key)) {
      Status st = Load(p.get(), job, key, nullptr);
      if (!st.ok()) {
        const bool dead = p->fd < 0;
        Release(std::move(p));
        if (!dead) return st;  // the code does not load: no use trying again
        if (++failures >= 3) return st;
        continue;
      }
    }
    // The request, written directly: a batch's is mostly numbers (a sample index and
    // a 64-bit seed per sample), and building and dumping a JSON document of them was
    // a tenth of a trainer's own CPU per batch with in-process Python processes.
    std::string req;
    req.reserve(64 + positions.size() * 32);
    auto number = [&req](auto v) {
      char text[24];
      req.append(text, std::to_chars(text, text + sizeof(text), v).ptr);
    };
    req += "{\"key\":\"" + KeyHex(key) + "\",\"samples\":[";
    for (size_t j = 0; j < positions.size(); ++j) {
      if (j > 0) req += ',';
      number(samples[positions[j]]);
    }
    req += "],\"seeds\":[";
    for (size_t j = 0; j < positions.size(); ++j) {
      if (j > 0) req += ',';
      number(SampleSeed(job.seed, epoch, samples[positions[j]]));
    }
    req += "],\"rows\":";
    number(rows);
    req += ",\"timeout\":";
    req += Json(o_.sample_timeout_s).dump();
    if (native != nullptr) {
      Json n;
      n["dims"] = native->dims;
      n["dtype"] = native->float32 ? "<f4" : "|u1";
      n["row_bytes"] = native->row_bytes;
      Json pos = Json::array(), labels = Json::array();
      for (size_t i : positions) {
        pos.push_back(i);
        labels.push_back(native->labels[i]);
      }
      n["rows"] = std::move(pos);  // which rows of the memfd this try makes
      n["labels"] = std::move(labels);
      req += ",\"native\":" + n.dump();
    }
    req += '}';
    p->ResetProgress();
    Status sent = p->Send(kBatch, req, {}, native_fd);
    Proc::Frame reply;
    bool got = false;
    if (sent.ok()) {
      // The sample being made is the process's progress word (shared memory, no
      // message per sample): read while waiting, and after a death.
      auto step_started = Clock::now();
      for (;;) {
        const Ended ready = p->WaitReadable(Clock::now() + std::chrono::milliseconds(250), cancel);
        const int32_t now_at = p->Progress();
        if (now_at != step) {
          step = now_at;
          step_started = Clock::now();
        }
        // With a sample timeout, a sample may take it plus the grace (SIGALRM not
        // delivered); without one, as long as it takes.
        if (ready == Ended::kTimedOut) {
          if (o_.sample_timeout_s > 0 && step >= 0 &&
              Clock::now() - step_started > Seconds(o_.sample_timeout_s + kWatchdogGraceS)) {
            timed_out = true;
            break;
          }
          continue;
        }
        Proc::Frame f;
        std::string error;
        const Ended e = ready == Ended::kNone
                            ? p->Receive(&f, Clock::now() + Seconds(kFrameTimeoutS), nullptr, &error)
                            : ready;
        if (e == Ended::kCancelled) {
          // The process is mid-batch: end it rather than wait (a new one takes its place).
          close(p->fd);
          p->fd = -1;
          Release(std::move(p));  // discarded; ~Proc kills it
          return Status::Cancelled("stopped");
        }
        if (e == Ended::kTimedOut) {
          timed_out = true;
          break;
        }
        if (e == Ended::kEof) {
          why = error;
          step = p->Progress();  // where it died
          break;
        }
        reply.kind = f.kind;
        reply.meta = std::move(f.meta);
        reply.fds.swap(f.fds);
        got = true;
        // The process counts a structure as sent once it sent it: keep it before any
        // check below can give the process back with this reply unused.
        if (auto it = reply.meta.find("structure"); it != reply.meta.end() && it->is_string())
          p->last_structure = it->get<std::string>();
        break;
      }
    }
    if (!got) {
      // The process is gone (or hung): replace it and make the batch again.
      if (timed_out) kill(p->pid, SIGKILL);
      const std::string reaped = p->Reap();
      close(p->fd);
      p->fd = -1;
      Release(std::move(p));
      if (why.empty()) why = reaped;
      const bool on_sample = step >= 0 && size_t(step) < positions.size();
      if (timed_out && on_sample) {
        char t[32];
        std::snprintf(t, sizeof(t), "%g", o_.sample_timeout_s);
        dropped[positions[size_t(step)]] = std::string("ran past the sample timeout (") + t +
                                           " s) where it could not be interrupted: its process was killed";
        LogWarn("user code: sample %lld ran past the sample timeout; its Python process was killed and replaced",
                (long long)samples[positions[size_t(step)]]);
        continue;
      }
      LogWarn("user code: a Python process %s while making a batch: replaced, and the batch made again",
              why.c_str());
      if (on_sample && ++deaths[positions[size_t(step)]] >= 2) {
        dropped[positions[size_t(step)]] = "its Python process " + why + " twice while making this sample";
        continue;
      }
      if (!on_sample && ++failures >= 3)
        return Status::Internal("user code: Python processes " + why + " three times on one batch");
      continue;
    }
    // A reply. Skipped positions are of this try's request.
    auto reason_of = [&](const Json& s) { return s.size() >= 2 && s[1].is_string() ? s[1].get<std::string>() : "?"; };
    std::map<size_t, std::string> skipped = dropped;
    if (reply.meta.contains("skipped") && reply.meta["skipped"].is_array()) {
      for (const Json& s : reply.meta["skipped"]) {
        if (!s.is_array() || s.empty() || !s[0].is_number_integer()) continue;
        const int64_t pos = s[0].get<int64_t>();
        if (pos >= 0 && size_t(pos) < positions.size()) skipped[positions[size_t(pos)]] = reason_of(s);
      }
    }
    if (reply.kind == kFailed) {
      // The batch as a whole failed (its collate raised): every sample is reported.
      const std::string error = reply.meta.value("error", std::string("the batch failed"));
      Release(std::move(p));
      for (size_t i = 0; i < samples.size(); ++i) {
        auto it = skipped.find(i);
        out.skipped.push_back({samples[i], "python:" + std::to_string(samples[i]),
                               it != skipped.end() ? it->second : error});
      }
      out.structure = "{\"k\":\"list\",\"v\":[]}";
      return out;
    }
    if (reply.kind != kBatchOk) {
      close(p->fd);
      p->fd = -1;
      Release(std::move(p));
      return Status::Internal("user code: the Python process sent an unexpected frame");
    }
    const int64_t bytes = reply.meta.value("bytes", int64_t(0));
    if (bytes < 0 || bytes % 8 != 0) {
      Release(std::move(p));
      return Status::Internal("user code: a batch of a bad size");
    }
    if (bytes > 0) {
      struct stat st;
      if (reply.fds.size() != 1 || fstat(reply.fds[0], &st) != 0 || st.st_size < bytes) {
        Release(std::move(p));
        return Status::Internal("user code: the batch's memory did not come with it");
      }
      // Private and writable: a trainer that writes into its tensors (in-process)
      // writes into pages of its own (copy on write), never the process's.
      const size_t n = size_t(bytes);
      // A buffer of the process's pool (0 <= buf < 64) goes back to it once this side
      // lets go (a byte of the shared page): its pages are written again, not freed
      // and zeroed for every batch; and it stays mapped here (Proc::maps).
      const int64_t buf = reply.meta.value("buf", int64_t(-1));
      const bool pooled = buf >= 0 && buf < kMaxBuffers;
      std::shared_ptr<Proc::Mapping> map = pooled ? p->maps[buf] : nullptr;
      if (map != nullptr && map->dev == st.st_dev && map->ino == st.st_ino && map->size == size_t(st.st_size)) {
        // The buffer's pages as the process wrote them again: pages this side wrote
        // (its private copies) are dropped, and read from the file again.
        if (madvise(map->addr, map->size, MADV_DONTNEED) != 0) map = nullptr;
      } else {
        map = nullptr;
      }
      if (map == nullptr) {
        map = std::make_shared<Proc::Mapping>();
        map->size = pooled ? size_t(st.st_size) : n;
        map->addr = mmap(nullptr, map->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, reply.fds[0], 0);
        if (map->addr == MAP_FAILED) {
          Release(std::move(p));
          return Status::ResourceExhausted(Errno("mapping a user-code batch"));
        }
        map->dev = st.st_dev;
        map->ino = st.st_ino;
        if (pooled) p->maps[buf] = map;
      }
      std::shared_ptr<void> page = pooled ? p->page : nullptr;
      out.owner = std::shared_ptr<void>(map->addr, [map, page, buf](void*) {
        if (page != nullptr) {
          auto* released = static_cast<std::atomic<uint8_t>*>(static_cast<void*>(
              static_cast<uint8_t*>(page.get()) + kReleasedOffset + size_t(buf)));
          released->store(1, std::memory_order_release);
        }
      });
      out.data = map->addr;
      out.bytes = n;
    }
    out.structure = p->last_structure;
    Release(std::move(p));
    for (size_t i = 0; i < samples.size(); ++i) {
      auto it = skipped.find(i);
      if (it == skipped.end()) {
        out.kept.push_back(samples[i]);
      } else {
        out.skipped.push_back({samples[i], "python:" + std::to_string(samples[i]), it->second});
      }
    }
    return out;
  }
}

Status CheckUserCode(PythonPool* pool, const JobSpec& job) {
  if (pool == nullptr) return UserCodeRefused();
  std::string warning;
  FERRY_RETURN_IF_ERROR(pool->Check(job, &warning));
  if (!warning.empty()) LogWarn("user code of %s: versions differ (%s)", job.dataset.c_str(), warning.c_str());
  return Status::OK();
}

Result<std::shared_ptr<const Dataset>> OpenUserCode(PythonPool* pool, const JobSpec& job) {
  FERRY_RETURN_IF_ERROR(CheckUserCode(pool, job));
  return std::shared_ptr<const Dataset>(MakeUserCodeDataset(job.num_samples, UserCodeFingerprint(job)));
}

}  // namespace ferry
