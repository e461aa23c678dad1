// Issue 37: what a corrupt work dir does to a dispatcher's start. The work dir of a real
// run (an in-process cluster over loopback: a job finished, a job resumed by a second
// client from a saved state, a job left mid-epoch, a compaction on the way, so that it
// holds a snapshot, a journal with records after it, and its identity), stopped as
// SIGTERM stops it. Then, for every byte offset of each of its files, that byte is
// flipped (all 8 bits, and separately the lowest one) and, separately, the file is cut
// there, and the dispatcher is started on the result, as the daemon starts
// (Dispatcher::Open). Each case must end one of two ways:
//   - refused: DataLoss whose message names the file and an offset, and the work dir
//     exactly as it was, byte for byte;
//   - started with every committed record: the replayed state and the identity equal
//     the uncorrupted start's (a cut inside the journal's last record may drop that
//     record alone: the state then equals the one replayed without it).
// Anything else is a silent loss; there must be none. The counts are printed.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dispatch/dispatcher.h"
#include "dispatch/journal.h"
#include "dispatch/journal_codec.h"
#include "dispatch/journal_file.h"
#include "test_cluster.h"
#include "testutil.h"

namespace ferry::testing {
namespace {

namespace fs = std::filesystem;
using Files = std::map<std::string, std::string>;

Files ReadDir(const std::string& dir) {
  Files all;
  for (const auto& e : fs::directory_iterator(dir)) all[e.path().filename().string()] = ReadFile(e.path().string());
  return all;
}

void WriteDir(const std::string& dir, const Files& files) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  for (const auto& [name, bytes] : files) WriteFile(dir + "/" + name, bytes);
}

// A run of real services that leaves the kinds of state a work dir holds: a snapshot
// with a finished job and a saved position in it, then a journal of the resumed
// trainer's and another job's progress.
Files WorkDirOfARealRun() {
  TempDir data;
  MakeImageFolder(data.path(), 2, 12);  // 24 samples: 6 batches of 4, 2 a split
  JobSpec job;
  job.dataset = data.path();
  auto spec = PipelineSpec::FromJson(
      R"({"ops":[{"op":"resize","size":[16,16]}],"output":{"dtype":"uint8","layout":"NHWC"}})");
  EXPECT_TRUE(spec.ok());
  job.pipeline = *spec;
  job.batch_size = 4;
  job.batches_per_split = 2;
  job.seed = 5;
  TestClusterOptions o;
  o.workers = 1;
  o.compact_every = 1;  // each sync compacts: what the first part leaves is a snapshot
  auto cluster = TestCluster::Start(o);
  EXPECT_TRUE(cluster.ok()) << cluster.status().ToString();
  if (!cluster.ok()) return {};
  auto take = [](Client* c, int n) {
    for (int i = 0; i < n; ++i) {
      Result<Batch> b = c->Next();
      if (!b.ok()) return b.status();
    }
    return Status::OK();
  };
  {  // a finished job
    job.epochs = 1;
    auto c = Client::Connect((*cluster)->ClientFor("finished", job));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return {};
    EXPECT_EQ(take(c->get(), 100).code(), StatusCode::kOutOfRange);
  }
  job.epochs = 3;
  std::string saved;
  {  // a trainer that stops mid-epoch with its position saved...
    auto c = Client::Connect((*cluster)->ClientFor("resumed", job));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return {};
    EXPECT_TRUE(take(c->get(), 8).ok());
    saved = (*c)->SaveState().Serialize();
  }
  // Then a dispatcher that compacts no more: the rest is journaled after the snapshot.
  (*cluster)->options().compact_every = 1000000;
  EXPECT_TRUE((*cluster)->RestartDispatcher().ok());
  std::vector<std::unique_ptr<Client>> open;
  {  // ...and the next one, resumed from it, and another job with progress
    ClientOptions r = (*cluster)->ClientFor("", job);
    r.resume_state = saved;
    auto c = Client::Connect(r);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return {};
    EXPECT_TRUE(take(c->get(), 3).ok());
    auto other = Client::Connect((*cluster)->ClientFor("progress", job));
    EXPECT_TRUE(other.ok()) << other.status().ToString();
    if (!other.ok()) return {};
    EXPECT_TRUE(take(other->get(), 5).ok());
    open.push_back(std::move(*c));
    open.push_back(std::move(*other));
  }
  (*cluster)->StopWorker(0);
  open.clear();
  (*cluster)->StopDispatcher();
  return ReadDir((*cluster)->dispatcher_work_dir());
}

struct Started {
  Status status;
  std::string state, id;
};

Started Start(const std::string& dir) {
  dispatch::DispatcherConfig config;
  config.work_dir = dir;
  config.sync = false;
  auto d = dispatch::Dispatcher::Open(config, 0);
  if (!d.ok()) return {d.status(), "", ""};
  return {Status::OK(), (*d)->state().DebugString(), (*d)->state_id()};
}

// Where the case dirs go: memory when there is some (a start syncs the directory).
std::string ScratchRoot() {
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec)) {
    std::string templ = "/dev/shm/ferry-journal-corruption-XXXXXX";
    if (::mkdtemp(templ.data()) != nullptr) return templ;
  }
  return "";
}

TEST(JournalCorruptionTest, EveryByteFlippedOrCutIsRefusedUnchangedOrLosesNothing) {
  Watchdog watchdog{600, "JournalCorruptionTest"};
  const Files pristine = WorkDirOfARealRun();
  ASSERT_FALSE(pristine.empty());
  std::string journal, snapshot;
  size_t replaced = 0;  // the generation the last compaction replaced (not read at start)
  for (const auto& [name, bytes] : pristine) {
    if (name.find(".replaced") != std::string::npos) ++replaced;
    else if (name.rfind("journal-", 0) == 0) journal = name;
    else if (name.rfind("snapshot-", 0) == 0) snapshot = name;
  }
  ASSERT_FALSE(journal.empty());
  ASSERT_FALSE(snapshot.empty()) << "the run compacted: a snapshot and a journal after it";
  ASSERT_TRUE(pristine.count("state-id"));
  ASSERT_EQ(pristine.size(), 3u + replaced) << "the generation's two files, state-id and the replaced generation";

  TempDir fallback;
  std::string root = ScratchRoot();
  const bool own_root = !root.empty();
  if (!own_root) root = fallback.path();
  const std::string dir = root + "/case";

  // The uncorrupted start, and the state without the journal's last record.
  WriteDir(dir, pristine);
  const Started whole = Start(dir);
  ASSERT_TRUE(whole.status.ok()) << whole.status.ToString();
  std::string without_last;
  uint64_t last_record_at = 0;
  {
    WriteDir(dir, pristine);
    std::vector<dispatch::Update> replay;
    dispatch::DispatcherState s;
    auto j = dispatch::Journal::Open(dir, &replay, &s);
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    ASSERT_GT((*j)->records_since_snapshot(), 5u) << "records after the snapshot: " << journal << " of "
                                                   << pristine.at(journal).size() << " bytes";
    EXPECT_TRUE((*j)->sealed()) << "a stopped dispatcher seals its journal";
    dispatch::DispatcherState less;
    for (size_t i = 0; i + 1 < replay.size(); ++i) ASSERT_TRUE(less.Apply(replay[i]).ok());
    without_last = less.DebugString();
    // Where the last record starts: the journal's size less that record's.
    const std::string last = dispatch::internal::Record(dispatch::EncodeUpdate(replay.back()));
    last_record_at = pristine.at(journal).size() - last.size();
  }

  struct Counts {
    int64_t cases = 0, refused = 0, intact = 0, dropped_last = 0, silent = 0, bad_refusal = 0;
  } n;
  std::vector<std::string> failures, intact;
  auto run = [&](const std::string& file, const std::string& how, uint64_t offset, const std::string& bytes) {
    Files corrupt = pristine;
    corrupt[file] = bytes;
    WriteDir(dir, corrupt);
    const Started got = Start(dir);
    ++n.cases;
    const std::string name = file + " " + how + " at " + std::to_string(offset);
    if (!got.status.ok()) {
      const std::string& m = got.status.message();
      const bool named = got.status.code() == StatusCode::kDataLoss && m.find(file) != std::string::npos &&
                         m.find("offset ") != std::string::npos;
      const bool unchanged = ReadDir(dir) == corrupt;
      if (named && unchanged) {
        ++n.refused;
      } else {
        ++n.bad_refusal;
        if (failures.size() < 20)
          failures.push_back(name + ": refused " + (named ? "" : "without naming the file and offset ") +
                             (unchanged ? "" : "and changed the work dir ") + "(" + got.status.ToString() + ")");
      }
      return;
    }
    if (got.state == whole.state && got.id == whole.id) {
      ++n.intact;
      if (intact.size() < 5) intact.push_back(name);
    } else if (how == "cut" && file == journal && offset > last_record_at && got.state == without_last &&
               got.id == whole.id) {
      ++n.dropped_last;
    } else {
      ++n.silent;
      if (failures.size() < 20) failures.push_back(name + ": started with a different state (silent loss)");
    }
  };
  for (const std::string& file : {snapshot, journal, std::string("state-id")}) {
    const std::string& bytes = pristine.at(file);
    for (size_t i = 0; i < bytes.size(); ++i) {
      for (const uint8_t mask : {uint8_t(0xff), uint8_t(0x01)}) {
        std::string flipped = bytes;
        flipped[i] = char(uint8_t(flipped[i]) ^ mask);
        run(file, mask == 0xff ? "byte flipped" : "low bit flipped", i, flipped);
      }
      run(file, "cut", i, bytes.substr(0, i));
    }
  }
  if (own_root) fs::remove_all(root);
  std::printf(
      "journal corruption: %lld cases over %s (%zu bytes), %s (%zu bytes) and state-id (%zu bytes): %lld refused "
      "(DataLoss naming the file and offset, the work dir unchanged), %lld started with every committed record, "
      "%lld dropped only a last record cut short, %lld refused otherwise, %lld silent losses\n",
      (long long)n.cases, snapshot.c_str(), pristine.at(snapshot).size(), journal.c_str(),
      pristine.at(journal).size(), pristine.at("state-id").size(), (long long)n.refused, (long long)n.intact,
      (long long)n.dropped_last, (long long)n.bad_refusal, (long long)n.silent);
  for (const std::string& f : intact) std::printf("  started with every record: %s\n", f.c_str());
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(n.silent, 0);
  EXPECT_EQ(n.bad_refusal, 0);
  EXPECT_EQ(n.cases, n.refused + n.intact + n.dropped_last + n.bad_refusal + n.silent);
}

}  // namespace
}  // namespace ferry::testing
