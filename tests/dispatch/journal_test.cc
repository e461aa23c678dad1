// The journal (lib/dispatch/journal.h): replay rebuilds the state exactly, with and
// without compaction; a torn tail is dropped and a corrupt middle is DataLoss; every
// update round-trips through its record and garbage never crashes the decoder.
#include "dispatch/journal.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>

#include <string>
#include <vector>

#include "core/philox.h"
#include "dispatch/decisions.h"
#include "dispatch_test_util.h"
#include "testutil.h"

namespace ferry::dispatch {
namespace {

using namespace ::ferry::dispatch::test;  // NOLINT

// A random walk of updates, journaled; replaying the journal (with and without a
// compaction in the middle) must rebuild the same state.
DispatcherState RandomWalk(Journal* journal, DispatcherState s, int steps, uint64_t seed, bool compact_midway) {
  SampleRng rng(seed, 0, 0);
  const std::vector<std::string> workers = {"w1", "w2", "w3"};
  for (int i = 0; i < steps; ++i) {
    Update u;
    const uint64_t pick = rng.Below(12);
    const std::string w = workers[rng.Below(3)];
    const std::string c = rng.Below(2) == 0 ? "c1" : "c2";
    if (pick == 10) {
      u = RemoveConsumer{"job", c};  // vanished: its unfinished splits go free
    } else if (pick == 11) {
      u = AddConsumer{"job", c};  // back (or a no-op)
    } else if (pick < 2) {
      u = RegisterWorker{w, "addr-" + w};
    } else if (pick < 6) {
      auto l = DecideLeases(s, w, LeasePolicy{3});
      if (l.empty()) continue;
      u = l[0];
    } else if (pick < 9) {
      auto leases = s.LeasesOf(w);
      if (leases.empty() || leases["job"].empty()) continue;
      const auto& one = leases["job"][rng.Below(leases["job"].size())];
      u = AckSplits{"job", one.consumer, {one.ref}};
    } else {
      if (!s.workers().count(w)) continue;
      u = RemoveWorker{w};
    }
    if (!s.Apply(u).ok()) continue;
    EXPECT_TRUE(journal->Append(u).ok());
    if (compact_midway && i == steps / 2) {
      EXPECT_TRUE(journal->Compact(s).ok());
    }
  }
  return s;
}

class JournalTest : public ::testing::TestWithParam<bool> {};

TEST_P(JournalTest, ReplayRebuildsTheState) {
  testing::TempDir dir;
  std::vector<Update> replay;
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  (*j)->set_sync(false);
  EXPECT_TRUE(replay.empty());
  DispatcherState s;
  for (const Update& u : {Update(Create("job", 200, 10, 2, 3)), Update(AddConsumer{"job", "c1"}),
                          Update(AddConsumer{"job", "c2"})}) {
    MustApply(s, u);
    ASSERT_TRUE((*j)->Append(u).ok());
  }
  s = RandomWalk(j->get(), std::move(s), 400, 7, GetParam());
  // The walk must have exercised leases, acks and deaths, not stood still.
  EXPECT_GT(s.applied(), 150u);
  EXPECT_GT(s.job("job")->first_open, 0u);
  j->reset();

  auto j2 = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j2.ok());
  DispatcherState r;
  for (const Update& u : replay) ASSERT_TRUE(r.Apply(u).ok());
  EXPECT_EQ(r.DebugString(), s.DebugString());
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutCompaction, JournalTest, ::testing::Bool());

TEST(JournalFileTest, TornTailIsDroppedCorruptMiddleIsAnError) {
  testing::TempDir dir;
  std::vector<Update> replay;
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*j)->Append(RegisterWorker{"w" + std::to_string(i), "a"}).ok());
  }
  const std::string path = dir.path() + "/journal-0";
  std::string bytes = testing::ReadFile(path);
  testing::WriteFile(path, bytes.substr(0, bytes.size() - 3));  // crash mid-append
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    EXPECT_EQ(replay.size(), 2u);
    ASSERT_TRUE((*j)->Append(RegisterWorker{"w9", "a"}).ok()) << "appends after the cut";
  }
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok());
    ASSERT_EQ(replay.size(), 3u);
    EXPECT_EQ(std::get<RegisterWorker>(replay[2]).worker, "w9");
  }
  bytes = testing::ReadFile(path);
  bytes[22] ^= 0x55;  // inside the first record's payload (after the magic and its header)
  testing::WriteFile(path, bytes);
  auto bad = Journal::Open(dir.path(), &replay);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
}

// A crash after the file grew but before its blocks were written leaves zeros at the
// end: dropped like a torn record, not a failed start.
TEST(JournalFileTest, AZeroFilledTailIsDroppedLikeATornOne) {
  testing::TempDir dir;
  std::vector<Update> replay;
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok());
    for (int i = 0; i < 2; ++i) ASSERT_TRUE((*j)->Append(RegisterWorker{"w" + std::to_string(i), "a"}).ok());
  }
  const std::string path = dir.path() + "/journal-0";
  testing::WriteFile(path, testing::ReadFile(path) + std::string(4096, '\0'));
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    EXPECT_EQ(replay.size(), 2u);
    ASSERT_TRUE((*j)->Append(RegisterWorker{"w9", "a"}).ok());
  }
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_EQ(replay.size(), 3u);
  EXPECT_EQ(std::get<RegisterWorker>(replay[2]).worker, "w9");
}

TEST(JournalFileTest, TemporariesOfAnInterruptedCompactionAreRemoved) {
  testing::TempDir dir;
  testing::WriteFile(dir.path() + "/snapshot-1.tmp", "half a snapshot");
  testing::WriteFile(dir.path() + "/state-id.tmp", "0123");
  std::vector<Update> replay;
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/snapshot-1.tmp"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/state-id.tmp"));
}

// A write that fails (the file size limit here, as a full disk would) loses no record:
// the file is cut back to whole records, the records wait in memory, and once writes
// work again a Sync() writes them, in order.
TEST(JournalFileTest, AFailedWriteLosesNothingAndRecovers) {
  ::signal(SIGXFSZ, SIG_IGN);  // past RLIMIT_FSIZE, write() fails with EFBIG instead
  testing::TempDir dir;
  std::vector<Update> replay;
  const std::string path = dir.path() + "/journal-0";
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok());
    (*j)->set_sync(false);
    ASSERT_TRUE((*j)->Append(RegisterWorker{"w0", "a"}).ok());
    ASSERT_TRUE((*j)->Append(RegisterWorker{"w1", "a"}).ok());
    ASSERT_TRUE((*j)->Sync().ok());
    const uintmax_t durable = std::filesystem::file_size(path);
    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    rlimit tight = old;
    tight.rlim_cur = rlim_t(durable + 10);  // room for part of one record
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &tight), 0);
    Status s2 = (*j)->Append(RegisterWorker{"w2", "a"});
    Status s3 = (*j)->Append(RegisterWorker{"w3", "a"});
    Status again = (*j)->Sync();
    const bool healthy = (*j)->healthy();
    const uintmax_t size = std::filesystem::file_size(path);
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
    EXPECT_FALSE(s2.ok());
    EXPECT_FALSE(s3.ok()) << "broken: queued, and the error again";
    EXPECT_FALSE(again.ok()) << "the limit still holds";
    EXPECT_FALSE(healthy);
    EXPECT_EQ(size, durable) << "no part of a record is left in the file";
    ASSERT_TRUE((*j)->Sync().ok()) << "room again: the queued records are written";
    EXPECT_TRUE((*j)->healthy());
    ASSERT_TRUE((*j)->Append(RegisterWorker{"w4", "a"}).ok());
    ASSERT_TRUE((*j)->Sync().ok());
  }
  ::signal(SIGXFSZ, SIG_DFL);
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_EQ(replay.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(std::get<RegisterWorker>(replay[size_t(i)]).worker, "w" + std::to_string(i));
}

TEST(UpdateCodecTest, RoundTripAndGarbage) {
  const std::vector<Update> all = {Create(), AddConsumer{"j", "c"}, RegisterWorker{"w", "h:1"},
                                   RegisterWorker{"w", "h:1", "j", "rank-3"},
                                   RemoveWorker{"w"}, DrainWorker{"w"}, LeaseSplits{"j", "w", {{{3, 4}, "c"}}},
                                   AckSplits{"j", "c", {{1, 2}, {1, 3}}}, RemoveJob{"j"}, JobProgress{"j", 5},
                                   RestoreConsumer{"j", "c", 3, {{3, 1}, {4, 0}}}, RemoveConsumer{"j", "c"},
                                   AssignSplits{"j", "c", {{2, 7}, {3, 0}}}, ReturnSplits{"j", "w"}};
  for (const Update& u : all) {
    Result<Update> back = DecodeUpdate(EncodeUpdate(u));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(EncodeUpdate(*back), EncodeUpdate(u));
  }
  SampleRng rng(3, 0, 0);
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng.Below(40), '\0');
    for (char& c : junk) c = char(rng.Below(256));
    (void)DecodeUpdate(junk);  // must not crash
  }
}

TEST(UpdateCodecTest, AJobKeepsEveryField) {
  JobSpec spec = Spec();
  spec.pipeline = PipelineSpec::ImagenetEval();
  spec.seed = 77;
  spec.last_batch = LastBatch::kPad;
  spec.ordering = Ordering::kDeterministic;
  spec.fingerprint = 0xABCDEF;
  Result<Update> back = DecodeUpdate(EncodeUpdate(CreateJob{"run", spec}));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto& c = std::get<CreateJob>(*back);
  EXPECT_EQ(c.name, "run");
  EXPECT_EQ(c.spec, spec);
}

TEST(UpdateCodecTest, AJournalOfTheOldJobFormatIsRefusedClearly) {
  // Tag 1 was CreateJob in the format before JobSpec (no longer read).
  Result<Update> old = DecodeUpdateV1(std::string("\x01\x03job", 5));
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(old.status().message().find("--work-dir"), std::string::npos) << old.status().ToString();
}

// Issue 25, defect 5: a record's length covered by no checksum made one flipped bit in
// it look like a write cut short by a crash, and recovery cut the file there, dropping
// that record and every later one in silence. The header has a checksum of its own
// now: the bit is DataLoss naming the offset, and the file is left as it was.
TEST(JournalFileTest, AFlippedBitInALengthBeforeTheEndIsDataLossNotACut) {
  testing::TempDir dir;
  std::vector<Update> replay;
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok());
    for (int i = 0; i < 4; ++i) ASSERT_TRUE((*j)->Append(RegisterWorker{"w" + std::to_string(i), "a"}).ok());
  }
  const std::string path = dir.path() + "/journal-0";
  std::string bytes = testing::ReadFile(path);
  ASSERT_EQ(bytes.compare(0, 8, "FERRYJ3\n"), 0) << "format 3's magic";
  uint32_t first = 0;
  std::memcpy(&first, bytes.data() + 8, 4);
  const size_t second = 8 + 12 + first;  // the second record's header
  bytes[second + 2] ^= 0x04;             // its length grows by 2^18: past the end
  testing::WriteFile(path, bytes);
  auto bad = Journal::Open(dir.path(), &replay);
  ASSERT_FALSE(bad.ok()) << "a corrupt length was taken for a torn write";
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("corrupt record header at offset " + std::to_string(second)),
            std::string::npos)
      << bad.status().ToString();
  EXPECT_EQ(testing::ReadFile(path), bytes) << "nothing was cut";
}

// A generation past 0 starts from its snapshot; without it, the state before the
// generation is lost, and saying so beats replaying half a state.
TEST(JournalFileTest, AMissingSnapshotIsDataLoss) {
  testing::TempDir dir;
  testing::WriteFile(dir.path() + "/journal-3", "FERRYJ2\n");
  std::vector<Update> replay;
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(j.status().message().find("snapshot-3 is missing"), std::string::npos) << j.status().ToString();
}

// Format 2 kept a job's `epochs` as its end epoch, [first_epoch, epochs); format 3
// keeps a count. A format 2 file (the same records, another magic) replays with its
// jobs' epochs converted, so that a job resumed at epoch 2 of 5 still ends at 5, and
// asks for the upgrade. A format 3 file is taken as written.
TEST(JournalFileTest, AFormatTwoJobsEndEpochBecomesItsCount) {
  testing::TempDir dir;
  std::vector<Update> replay;
  JobSpec resumed = Spec();
  resumed.first_epoch = 2;
  resumed.epochs = 5;  // format 2: epochs 2, 3 and 4
  JobSpec endless = Spec();
  endless.first_epoch = 7;
  endless.epochs = 0;
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE((*j)->Append(CreateJob{"resumed", resumed}).ok());
    ASSERT_TRUE((*j)->Append(CreateJob{"endless", endless}).ok());
  }
  const std::string path = dir.path() + "/journal-0";
  std::string bytes = testing::ReadFile(path);
  ASSERT_EQ(bytes.compare(0, 8, "FERRYJ3\n"), 0);
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok());
    EXPECT_FALSE((*j)->upgrade_due());
    ASSERT_EQ(replay.size(), 2u);
    EXPECT_EQ(std::get<CreateJob>(replay[0]).spec.epochs, 5) << "format 3: a count, as written";
  }
  bytes.replace(0, 8, "FERRYJ2\n");
  testing::WriteFile(path, bytes);
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_TRUE((*j)->upgrade_due());
  ASSERT_EQ(replay.size(), 2u);
  const JobSpec& got = std::get<CreateJob>(replay[0]).spec;
  EXPECT_EQ(got.epochs, 3);
  EXPECT_EQ(got.end_epoch(), 5u);
  EXPECT_FALSE(got.PastEnd(4));
  EXPECT_TRUE(got.PastEnd(5));
  EXPECT_EQ(std::get<CreateJob>(replay[1]).spec.epochs, 0) << "no end stays no end";
}

// A journal of format 1 (an older Ferry: no magic, 8-byte headers, varints) replays,
// and says that it must be upgraded: the records that follow are format 2's.
TEST(JournalFileTest, AJournalOfFormatOneReplaysAndAsksForTheUpgrade) {
  testing::TempDir dir;
  testing::WriteFile(dir.path() + "/journal-0",
                    FormatOneJournal({std::string("\x03\x02w0\x01" "a", 6), std::string("\x03\x02w1\x01" "b", 6)}));
  std::vector<Update> replay;
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_EQ(replay.size(), 2u);
  EXPECT_EQ(std::get<RegisterWorker>(replay[1]).address, "b");
  EXPECT_TRUE((*j)->upgrade_due());
}

}  // namespace
}  // namespace ferry::dispatch
