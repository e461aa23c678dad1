// The Python pool (lib/pyrt/python_pool.h) with real python3 processes: batches and
// their skips, a process that dies (replaced, the batch made again), a sample that
// kills its process every time (skipped), one stuck where SIGALRM cannot reach it
// (the watchdog), code that cannot load (named), and a cancel.
//
// The user code is pickled by cloudpickle in a python3 of the test's own; without
// python3, numpy or cloudpickle the tests are skipped.
#include "pyrt/python_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <set>
#include <thread>

#include "ferry/loader.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::TempDir;
using testing::WriteFile;

constexpr const char* kPython = "/usr/bin/python3";

bool HavePython() {
  static const bool have =
      std::system((std::string(kPython) + " -c 'import numpy, cloudpickle' >/dev/null 2>&1").c_str()) == 0;
  return have;
}

// A job whose code is `source` (Python defining `dataset`, and optionally
// `transform` and `collate_fn`), pickled by cloudpickle.
JobSpec JobOf(const TempDir& dir, const std::string& source, int64_t n, uint64_t seed = 7) {
  WriteFile(dir / "code.py", source +
                                 "\nimport cloudpickle, sys\n"
                                 "g = globals()\n"
                                 "sys.stdout.buffer.write(cloudpickle.dumps((g['dataset'], g.get('transform'), "
                                 "g.get('collate_fn'))))\n");
  const std::string out = dir / "payload.bin";
  const std::string cmd = std::string(kPython) + " " + (dir / "code.py") + " > " + out;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  JobSpec job;
  job.dataset = "python:Test";
  job.user_code.payload = ss.str();
  job.user_code.versions = "{}";
  job.num_samples = n;
  job.seed = seed;
  return job;
}

PythonPoolOptions Options(int processes = 1, double timeout = 0) {
  PythonPoolOptions o;
  o.python = kPython;
  o.processes = processes;
  o.sample_timeout_s = timeout;
  return o;
}

#define SKIP_WITHOUT_PYTHON() \
  if (!HavePython()) GTEST_SKIP() << "needs " << kPython << " with numpy and cloudpickle"

TEST(PythonPoolTest, MakesABatchAndReportsASampleWhoseCodeRaises) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  const JobSpec job = JobOf(dir,
                            "import numpy as np, random\n"
                            "class D:\n"
                            "    def __len__(self): return 10\n"
                            "    def __getitem__(self, i):\n"
                            "        if i == 3: raise KeyError('no label for 3')\n"
                            "        return np.full(4, i, dtype=np.int32), random.random()\n"
                            "dataset = D()\n",
                            10);
  PythonPool pool(Options());
  ASSERT_TRUE(pool.Check(job).ok());
  Result<UserBatch> b = pool.MakeBatch(job, 0, {5, 3, 1}, 0);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->kept, (std::vector<int64_t>{5, 1}));
  ASSERT_EQ(b->skipped.size(), 1u);
  EXPECT_EQ(b->skipped[0].index, 3);
  EXPECT_EQ(b->skipped[0].reason, "KeyError: 'no label for 3'");
  // The int32 [2, 4] stack comes first in the block (offset 0): rows 5 then 1.
  ASSERT_GE(b->bytes, 32u);
  const auto* v = static_cast<const int32_t*>(b->data);
  EXPECT_EQ(v[0], 5);
  EXPECT_EQ(v[4], 1);
  EXPECT_NE(b->structure.find("\"dtype\": \"<i4\""), std::string::npos) << b->structure;
  // The same request again: the same bytes (seeded per sample).
  Result<UserBatch> again = pool.MakeBatch(job, 0, {5, 3, 1}, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->structure, b->structure);
  EXPECT_EQ(std::string(static_cast<const char*>(again->data), again->bytes),
            std::string(static_cast<const char*>(b->data), b->bytes));
  EXPECT_EQ(pool.started(), 1);
}

TEST(PythonPoolTest, ADeadProcessIsReplacedAndItsBatchMadeAgain) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  const std::string marker = dir / "died";
  const JobSpec job = JobOf(dir,
                            "import os\n"
                            "class D:\n"
                            "    def __len__(self): return 8\n"
                            "    def __getitem__(self, i):\n"
                            "        if i == 2 and not os.path.exists('" + marker + "'):\n"
                            "            open('" + marker + "', 'w').close()\n"
                            "            os._exit(9)\n"
                            "        return i\n"
                            "dataset = D()\n",
                            8);
  PythonPool pool(Options());
  Result<UserBatch> b = pool.MakeBatch(job, 0, {0, 1, 2, 3}, 0);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->kept, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(b->skipped.empty());
  EXPECT_EQ(pool.started(), 2);
  EXPECT_EQ(pool.pids().size(), 1u);
}

TEST(PythonPoolTest, ASampleThatKillsItsProcessEveryTimeIsSkipped) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  const JobSpec job = JobOf(dir,
                            "import os, signal\n"
                            "class D:\n"
                            "    def __len__(self): return 8\n"
                            "    def __getitem__(self, i):\n"
                            "        if i == 6: os.kill(os.getpid(), signal.SIGSEGV)\n"
                            "        return i\n"
                            "dataset = D()\n",
                            8);
  PythonPool pool(Options());
  Result<UserBatch> b = pool.MakeBatch(job, 1, {4, 6, 7}, 0);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->kept, (std::vector<int64_t>{4, 7}));
  ASSERT_EQ(b->skipped.size(), 1u);
  EXPECT_EQ(b->skipped[0].index, 6);
  EXPECT_NE(b->skipped[0].reason.find("killed by signal 11 twice"), std::string::npos) << b->skipped[0].reason;
}

TEST(PythonPoolTest, TheWatchdogSkipsASampleStuckWhereNoAlarmReaches) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  // SIGALRM blocked: the sample's timeout cannot interrupt it (as C code would not).
  const JobSpec job = JobOf(dir,
                            "import signal, time\n"
                            "class D:\n"
                            "    def __len__(self): return 4\n"
                            "    def __getitem__(self, i):\n"
                            "        if i == 1:\n"
                            "            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\n"
                            "            time.sleep(600)\n"
                            "        return i\n"
                            "dataset = D()\n",
                            4);
  PythonPool pool(Options(1, 0.5));
  const auto t0 = std::chrono::steady_clock::now();
  Result<UserBatch> b = pool.MakeBatch(job, 0, {0, 1, 2}, 0);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  EXPECT_EQ(b->kept, (std::vector<int64_t>{0, 2}));
  ASSERT_EQ(b->skipped.size(), 1u);
  EXPECT_NE(b->skipped[0].reason.find("could not be interrupted"), std::string::npos) << b->skipped[0].reason;
}

TEST(PythonPoolTest, CodeThatCannotLoadFailsTheCheckNamingTheModule) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  // A class of a module that exists only in the pickling process (by reference).
  const JobSpec job = JobOf(dir,
                            "import sys, types\n"
                            "m = types.ModuleType('only_here_mod')\n"
                            "exec('class D:\\n    def __len__(self): return 1\\n', m.__dict__)\n"
                            "m.D.__module__ = 'only_here_mod'\n"
                            "sys.modules['only_here_mod'] = m\n"
                            "dataset = m.D()\n",
                            1);
  PythonPool pool(Options());
  const Status st = pool.Check(job);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("No module named 'only_here_mod'"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("install module 'only_here_mod'"), std::string::npos) << st.ToString();
  Result<UserBatch> b = pool.MakeBatch(job, 0, {0}, 0);
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
}

TEST(PythonPoolTest, AnInterpreterThatCannotRunIsNamedNotABrokenPipe) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  const JobSpec job = JobOf(dir, "class D:\n    def __len__(self): return 1\ndataset = D()\n", 1);
  PythonPoolOptions o = Options();
  o.python = dir.path() + "/no-such-python3";
  PythonPool pool(o);
  const Status st = pool.Check(job);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("no-such-python3) could not be executed"), std::string::npos) << st.ToString();
}

TEST(PythonPoolTest, AStructureIsLeftOutOnlyWhenItsTextRepeats) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  // Batches whose structures are equal as Python values (1 == True == 1.0) but not as
  // JSON: each must come with its own; a repeat may leave it out.
  const JobSpec job = JobOf(dir,
                            "class D:\n"
                            "    def __len__(self): return 8\n"
                            "    def __getitem__(self, i): return i\n"
                            "dataset = D()\n"
                            "def collate_fn(rows):\n"
                            "    return [[1, True, 1.0, 1][rows[0] // 2]]\n",
                            8);
  PythonPool pool(Options(1));
  ASSERT_TRUE(pool.Check(job).ok());
  std::vector<std::string> got;
  for (int64_t first : {0, 2, 4, 6, 7}) {
    Result<UserBatch> b = pool.MakeBatch(job, 0, {first}, 0);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    got.push_back(b->structure);
  }
  EXPECT_NE(got[0], got[1]);  // 1, then True
  EXPECT_NE(got[1], got[2]);  // True, then 1.0
  EXPECT_NE(got[2], got[3]);  // 1.0, then 1
  EXPECT_EQ(got[3], got[4]);  // 1 again: the kept structure, and the same
  EXPECT_NE(got[1].find("true"), std::string::npos) << got[1];
}

TEST(PythonPoolTest, ACancelEndsAWaitPromptly) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  const JobSpec job = JobOf(dir,
                            "import time\n"
                            "class D:\n"
                            "    def __len__(self): return 2\n"
                            "    def __getitem__(self, i):\n"
                            "        time.sleep(30)\n"
                            "dataset = D()\n",
                            2);
  PythonPool pool(Options());
  ASSERT_TRUE(pool.Check(job).ok());
  std::atomic<bool> cancel{false};
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  Result<UserBatch> b = pool.MakeBatch(job, 0, {0, 1}, 0, &cancel);
  t.join();
  EXPECT_EQ(b.status().code(), StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(PythonPoolTest, SeedsAreTheSamplesNotTheProcesses) {
  EXPECT_EQ(PythonPool::SampleSeed(1, 2, 3), PythonPool::SampleSeed(1, 2, 3));
  EXPECT_NE(PythonPool::SampleSeed(1, 2, 3), PythonPool::SampleSeed(1, 2, 4));
  EXPECT_NE(PythonPool::SampleSeed(1, 2, 3), PythonPool::SampleSeed(1, 3, 3));
  EXPECT_NE(PythonPool::SampleSeed(1, 2, 3), PythonPool::SampleSeed(2, 2, 3));
  EXPECT_LT(PythonPool::SampleSeed(9, 9, 9), uint64_t(1) << 63);
}

// The in-process Loader of a whole user-code dataset: its batches are planned and made
// by one loop per Python process (BatchProducer::RunUserCode), each mapping its
// process's reused buffers once. Three processes, three epochs: every batch in order,
// every sample once an epoch, each row's bytes its own sample's even where the trainer
// wrote into the batch before (its own pages, dropped before the buffer is reused);
// and a loader closed mid-epoch stops cleanly (TSan and ASan builds run this too).
TEST(PythonPoolTest, ALoaderOfAWholeDatasetMakesEachBatchOnceInOrderFromEveryProcess) {
  SKIP_WITHOUT_PYTHON();
  TempDir dir;
  constexpr int64_t kSamples = 100;
  JobSpec job = JobOf(dir,
                      "import numpy as np\n"
                      "class D:\n"
                      "    def __len__(self): return 100\n"
                      "    def __getitem__(self, i):\n"
                      "        return np.full(4, i, dtype=np.int32), i % 3\n"
                      "dataset = D()\n",
                      kSamples);
  job.batch_size = 8;
  job.epochs = 3;
  LoaderOptions o;
  o.job = job;
  o.prefetch = 3;
  o.python = Options(3);
  Result<std::unique_ptr<Loader>> loader = Loader::Open(o);
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  const int64_t per_epoch = (*loader)->batches_per_epoch();
  ASSERT_EQ(per_epoch, 13);
  std::vector<std::set<int64_t>> seen(3);
  int64_t batches = 0;
  for (;;) {
    Result<Batch> b = (*loader)->Next();
    if (!b.ok()) {
      ASSERT_TRUE(b.status().IsOutOfRange()) << b.status().ToString();
      break;
    }
    ASSERT_LT(b->provenance.epoch, 3u);
    EXPECT_EQ(b->provenance.batch_in_epoch, batches % per_epoch);
    ++batches;
    ASSERT_FALSE(b->structure.empty());
    ASSERT_GE(b->user_data.shape[0], b->valid * 16);
    auto* rows = static_cast<int32_t*>(b->user_data.data);
    const auto* indices = static_cast<const int64_t*>(b->indices.data);
    for (int64_t r = 0; r < b->valid; ++r) {
      EXPECT_TRUE(seen[b->provenance.epoch].insert(indices[r]).second) << "sample " << indices[r] << " twice";
      for (int c = 0; c < 4; ++c) EXPECT_EQ(rows[r * 4 + c], indices[r]) << "row " << r << " of batch " << batches;
      rows[r * 4] = -1;  // the trainer's own write (copy on write)
    }
  }
  EXPECT_EQ(batches, 3 * per_epoch);
  for (const auto& epoch : seen) EXPECT_EQ(int64_t(epoch.size()), kSamples);

  // Closed mid-epoch, with batches in flight.
  Result<std::unique_ptr<Loader>> again = Loader::Open(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*again)->Next().ok());
  again->reset();
}

}  // namespace
}  // namespace ferry
