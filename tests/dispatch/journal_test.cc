// The journal (lib/dispatch/journal.h): replay rebuilds the state exactly, with and
// without compaction; a torn tail is dropped and a corrupt middle is DataLoss; every
// update round-trips through its record and garbage never crashes the decoder.
#include "dispatch/journal.h"
#include "dispatch/journal_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>
#include <map>

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

// The records' checksum is CRC-32 as zlib's: the check value, and a byte-at-a-time
// reference at every length and alignment (the fast path takes eight bytes a step).
TEST(JournalFileTest, RecordChecksumIsCrc32) {
  EXPECT_EQ(internal::Crc32(std::string("123456789")), 0xCBF43926u);
  EXPECT_EQ(internal::Crc32(std::string()), 0u);
  auto reference = [](const char* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) {
      c ^= uint8_t(p[i]);
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
  };
  std::string bytes(300, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = char((i * 131 + 7) ^ (i >> 3));
  for (size_t at = 0; at < 8; ++at)
    for (size_t n = 0; at + n <= bytes.size(); n += 1 + n / 7)
      ASSERT_EQ(internal::Crc32(bytes.data() + at, n), reference(bytes.data() + at, n)) << at << " " << n;
}

TEST(JournalFileTest, TornTailIsDroppedCorruptMiddleIsAnError) {
  testing::TempDir dir;
  std::vector<Update> replay;
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*j)->Append(RegisterWorker{"w" + std::to_string(i), "a"}).ok());
    (*j)->TEST_CrashClose();  // the last record is past the header's committed length
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
  bytes[internal::kFileHeaderSize + 14] ^= 0x55;  // inside the first record's payload (after the file's header and its own)
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
// work again a Sync() writes them, in order. Without sync per record (the dispatcher's
// group commit), records are written at Sync(), so that is where the failure shows;
// from then on every Append() returns it, and queues its record.
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
    Status commit = (*j)->Sync();
    const bool healthy = (*j)->healthy();
    Status s4 = (*j)->Append(RegisterWorker{"w4", "a"});
    Status again = (*j)->Sync();
    const uintmax_t size = std::filesystem::file_size(path);
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
    EXPECT_TRUE(s2.ok()) << "kept for the group commit";
    EXPECT_TRUE(s3.ok());
    EXPECT_FALSE(commit.ok()) << "the group's write failed";
    EXPECT_FALSE(healthy);
    EXPECT_FALSE(s4.ok()) << "broken: queued, and the error again";
    EXPECT_FALSE(again.ok()) << "the limit still holds";
    EXPECT_EQ(size, durable) << "no part of a record is left in the file";
    ASSERT_TRUE((*j)->Sync().ok()) << "room again: the queued records are written";
    EXPECT_TRUE((*j)->healthy());
    ASSERT_TRUE((*j)->Append(RegisterWorker{"w5", "a"}).ok());
    ASSERT_TRUE((*j)->Sync().ok());
  }
  ::signal(SIGXFSZ, SIG_DFL);
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_EQ(replay.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(std::get<RegisterWorker>(replay[size_t(i)]).worker, "w" + std::to_string(i));
}

// A group commit's records are written by its Sync(), in one write; a burst larger
// than Journal::kWriteAhead is written as it comes (memory stays bounded between
// commits), and either way every record is there, in order, after a restart.
TEST(JournalFileTest, AGroupCommitIsWrittenAtSyncAndABurstAsItComes) {
  testing::TempDir dir;
  std::vector<Update> replay;
  const std::string path = dir.path() + "/journal-0";
  const std::string address(200, 'a');  // records of about 230 bytes
  const size_t record = internal::Record(EncodeUpdate(RegisterWorker{"w0000", address})).size();
  const int burst = int(Journal::kWriteAhead / record) + 10;
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok());
    (*j)->set_sync(false);
    ASSERT_TRUE((*j)->Sync().ok());
    const uintmax_t empty = std::filesystem::file_size(path);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*j)->Append(RegisterWorker{"g" + std::to_string(1000 + i), address}).ok());
    EXPECT_EQ(std::filesystem::file_size(path), empty) << "a group's records wait for its Sync()";
    ASSERT_TRUE((*j)->Sync().ok());
    const uintmax_t group = std::filesystem::file_size(path);
    EXPECT_EQ(group, empty + 3 * record);
    for (int i = 0; i < burst; ++i) ASSERT_TRUE((*j)->Append(RegisterWorker{"b" + std::to_string(10000 + i), address}).ok());
    const uintmax_t before_sync = std::filesystem::file_size(path);
    EXPECT_GE(before_sync, group + Journal::kWriteAhead) << "a burst past kWriteAhead is written before Sync()";
    EXPECT_LT(before_sync, group + uintmax_t(burst) * record) << "the last records of the burst wait for Sync()";
    ASSERT_TRUE((*j)->Sync().ok());
    EXPECT_EQ(std::filesystem::file_size(path), group + uintmax_t(burst) * record);
    j->get()->TEST_CrashClose();  // not sealed: what Sync() made durable must be all there
  }
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_EQ(replay.size(), size_t(3 + burst));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(std::get<RegisterWorker>(replay[size_t(i)]).worker, "g" + std::to_string(1000 + i));
  for (int i = 0; i < burst; ++i)
    EXPECT_EQ(std::get<RegisterWorker>(replay[size_t(3 + i)]).worker, "b" + std::to_string(10000 + i));
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
  ASSERT_EQ(bytes.compare(0, 8, "FERRYJ4\n"), 0) << "format 4's magic";
  uint32_t first = 0;
  std::memcpy(&first, bytes.data() + internal::kFileHeaderSize, 4);
  const size_t second = internal::kFileHeaderSize + 12 + first;  // the second record's header
  bytes[second + 2] ^= 0x04;             // its length grows by 2^18: past the end
  testing::WriteFile(path, bytes);
  auto bad = Journal::Open(dir.path(), &replay);
  ASSERT_FALSE(bad.ok()) << "a corrupt length was taken for a torn write";
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("journal-0: offset " + std::to_string(second) + ": corrupt record header"),
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
  EXPECT_NE(j.status().message().find("snapshot-3: offset 0: missing beside journal-3"), std::string::npos) << j.status().ToString();
}

// Format 2 kept a job's `epochs` as its end epoch, [first_epoch, epochs); formats 3 and
// 4 keep a count. A format 2 file (the same records, another magic) replays with its
// jobs' epochs converted, so that a job resumed at epoch 2 of 5 still ends at 5. A
// format 3 file is taken as written. Both are upgraded to format 4 on opening.
TEST(JournalFileTest, AFormatTwoJobsEndEpochBecomesItsCount) {
  JobSpec resumed = Spec();
  resumed.first_epoch = 2;
  resumed.epochs = 5;  // format 2: epochs 2, 3 and 4
  JobSpec endless = Spec();
  endless.first_epoch = 7;
  endless.epochs = 0;
  const std::string records = internal::Record(EncodeUpdate(CreateJob{"resumed", resumed})) +
                              internal::Record(EncodeUpdate(CreateJob{"endless", endless}));
  std::vector<Update> replay;
  {
    testing::TempDir dir;
    testing::WriteFile(dir.path() + "/journal-0", "FERRYJ3\n" + records);
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    EXPECT_EQ((*j)->format_read(), 3);
    ASSERT_EQ(replay.size(), 2u);
    EXPECT_EQ(std::get<CreateJob>(replay[0]).spec.epochs, 5) << "format 3: a count, as written";
  }
  testing::TempDir dir;
  testing::WriteFile(dir.path() + "/journal-0", "FERRYJ2\n" + records);
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)->format_read(), 2);
  ASSERT_EQ(replay.size(), 2u);
  const JobSpec& got = std::get<CreateJob>(replay[0]).spec;
  EXPECT_EQ(got.epochs, 3);
  EXPECT_EQ(got.end_epoch(), 5u);
  EXPECT_FALSE(got.PastEnd(4));
  EXPECT_TRUE(got.PastEnd(5));
  EXPECT_EQ(std::get<CreateJob>(replay[1]).spec.epochs, 0) << "no end stays no end";
}

// A journal of format 1 (an older Ferry: no magic, 8-byte headers, varints) replays,
// and is upgraded: generation 1 in format 4, the file it was read from kept.
TEST(JournalFileTest, AJournalOfFormatOneReplaysAndIsUpgraded) {
  testing::TempDir dir;
  const std::string v1 =
      FormatOneJournal({std::string("\x03\x02w0\x01" "a", 6), std::string("\x03\x02w1\x01" "b", 6)});
  testing::WriteFile(dir.path() + "/journal-0", v1);
  std::vector<Update> replay;
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_EQ(replay.size(), 2u);
  EXPECT_EQ(std::get<RegisterWorker>(replay[1]).address, "b");
  EXPECT_EQ((*j)->format_read(), 1);
  EXPECT_EQ((*j)->generation(), 1u);
  EXPECT_EQ(testing::ReadFile(dir.path() + "/journal-0.replaced"), v1) << "the source, kept whole";
}

// Every file of a work dir, by name: what a refused start must leave as it was.
std::map<std::string, std::string> WorkDirFiles(const std::string& dir) {
  std::map<std::string, std::string> all;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    all[e.path().filename().string()] = testing::ReadFile(e.path().string());
  return all;
}

void WriteJournalOf(const std::string& dir, int records, bool crash = false) {
  std::vector<Update> none;
  auto j = Journal::Open(dir, &none);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  for (int i = 0; i < records; ++i) ASSERT_TRUE((*j)->Append(RegisterWorker{"w" + std::to_string(i), "a"}).ok());
  if (crash) (*j)->TEST_CrashClose();
}

// Issue 37: a file is read as an older format only when it positively is one. Any byte
// of the magic changed (to anything) is DataLoss naming that offset, and the work dir is
// left as it was; so is a file of no format at all.
TEST(JournalFileTest, AMagicOfNoKnownFormatIsDataLossAndChangesNothing) {
  for (size_t at = 0; at < 8; ++at) {
    for (const uint8_t mask : {uint8_t(0x01), uint8_t(0x80), uint8_t(0xff)}) {
      testing::TempDir dir;
      WriteJournalOf(dir.path(), 3);
      const std::string path = dir.path() + "/journal-0";
      std::string bytes = testing::ReadFile(path);
      bytes[at] = char(uint8_t(bytes[at]) ^ mask);
      testing::WriteFile(path, bytes);
      const auto before = WorkDirFiles(dir.path());
      std::vector<Update> replay;
      auto j = Journal::Open(dir.path(), &replay);
      ASSERT_FALSE(j.ok()) << "byte " << at << " ^ " << int(mask);
      EXPECT_EQ(j.status().code(), StatusCode::kDataLoss);
      EXPECT_NE(j.status().message().find("journal-0: offset " + std::to_string(at) + ": not a journal"),
                std::string::npos)
          << j.status().ToString();
      EXPECT_EQ(WorkDirFiles(dir.path()), before);
    }
  }
  testing::TempDir dir;
  testing::WriteFile(dir.path() + "/journal-0", "this is no journal at all, but it is not empty");
  std::vector<Update> replay;
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(testing::ReadFile(dir.path() + "/journal-0"), "this is no journal at all, but it is not empty");
}

// A closed journal is sealed: its header's committed length is the whole file, and a
// cut anywhere, even between two records, is DataLoss. After a crash the records of the
// last sync lie past the committed length: a cut there is a torn tail, dropped (and
// only there: a cut before the committed length is still DataLoss).
TEST(JournalFileTest, ACutBeforeTheCommittedLengthIsDataLossAndOnlyATailIsTorn) {
  std::vector<Update> replay;
  {
    testing::TempDir dir;
    WriteJournalOf(dir.path(), 4);
    const std::string path = dir.path() + "/journal-0";
    const std::string bytes = testing::ReadFile(path);
    const std::string last = internal::Record(EncodeUpdate(RegisterWorker{"w3", "a"}));
    testing::WriteFile(path, bytes.substr(0, bytes.size() - last.size()));  // at a record's boundary
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_FALSE(j.ok()) << "a sealed journal lost its last record in silence";
    EXPECT_EQ(j.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(j.status().message().find("journal-0: offset"), std::string::npos) << j.status().ToString();
  }
  testing::TempDir dir;
  WriteJournalOf(dir.path(), 4, /*crash=*/true);
  const std::string path = dir.path() + "/journal-0";
  const std::string bytes = testing::ReadFile(path);
  const size_t record = internal::Record(EncodeUpdate(RegisterWorker{"w3", "a"})).size();
  testing::WriteFile(path, bytes.substr(0, bytes.size() - record - 3));  // into the third record
  auto refused = Journal::Open(dir.path(), &replay);
  ASSERT_FALSE(refused.ok()) << "the third record was synced before the header was last written";
  testing::WriteFile(path, bytes.substr(0, bytes.size() - 3));  // into the fourth: the last sync's
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(replay.size(), 3u);
}

// An upgrade writes the new generation whole before it touches its source, and keeps
// the source (renamed) until the next start; an upgrade that fails leaves the work dir
// as it was.
TEST(JournalFileTest, AnUpgradeKeepsItsSourceAndAFailedOneChangesNothing) {
  const std::string records = internal::Record(EncodeUpdate(RegisterWorker{"w0", "a"})) +
                              internal::Record(EncodeUpdate(RegisterWorker{"w1", "b"}));
  std::vector<Update> replay;
  {
    testing::TempDir dir;
    testing::WriteFile(dir.path() + "/journal-0", "FERRYJ3\n" + records);
    testing::WriteFile(dir.path() + "/state-id", "0123456789abcdef");  // before its checksum
    // The snapshot cannot be written: its temporary name is taken by a directory.
    std::filesystem::create_directory(dir.path() + "/snapshot-1.tmp");
    const auto before = WorkDirFiles(dir.path());
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_FALSE(j.ok());
    EXPECT_NE(j.status().message().find("(the work dir is as it was)"), std::string::npos) << j.status().ToString();
    EXPECT_EQ(WorkDirFiles(dir.path()), before);
    EXPECT_TRUE(std::filesystem::is_directory(dir.path() + "/snapshot-1.tmp"));
  }
  testing::TempDir dir;
  testing::WriteFile(dir.path() + "/journal-0", "FERRYJ3\n" + records);
  testing::WriteFile(dir.path() + "/state-id", "0123456789abcdef");
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    EXPECT_EQ((*j)->format_read(), 3);
    EXPECT_EQ((*j)->state_id(), "0123456789abcdef");
  }
  auto files = WorkDirFiles(dir.path());
  EXPECT_EQ(files["journal-0.replaced"], "FERRYJ3\n" + records) << "the source, whole";
  EXPECT_FALSE(files.count("journal-0"));
  EXPECT_EQ(files["state-id"], internal::FormatStateId("0123456789abcdef")) << "the same id, with its checksum";
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(replay.size(), 2u);
  EXPECT_EQ((*j)->format_read(), 4);
  files = WorkDirFiles(dir.path());
  EXPECT_FALSE(files.count("journal-0.replaced")) << "the next successful start removes it";
  EXPECT_TRUE(files.count("journal-1") && files.count("snapshot-1"));
}

// A compaction keeps the generation it replaced until the next compaction or start.
TEST(JournalFileTest, ACompactionKeepsTheGenerationItReplacedUntilTheNextStart) {
  testing::TempDir dir;
  std::vector<Update> replay;
  {
    DispatcherState s;
    auto j = Journal::Open(dir.path(), &replay, &s);
    ASSERT_TRUE(j.ok());
    for (int round = 0; round < 3; ++round) {
      const Update u = RegisterWorker{"w" + std::to_string(round), "a"};
      ASSERT_TRUE(s.Apply(u).ok());
      ASSERT_TRUE((*j)->Append(u).ok());
      ASSERT_TRUE((*j)->Compact(s).ok());
    }
    const auto files = WorkDirFiles(dir.path());
    EXPECT_TRUE(files.count("journal-2.replaced") && files.count("snapshot-2.replaced"));
    EXPECT_FALSE(files.count("journal-1.replaced")) << "only the last one replaced";
    EXPECT_TRUE(files.count("journal-3") && files.count("snapshot-3"));
  }
  DispatcherState s;
  auto j = Journal::Open(dir.path(), &replay, &s);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(s.workers().size(), 3u);
  EXPECT_FALSE(WorkDirFiles(dir.path()).count("journal-2.replaced"));
}

// A compaction's snapshot is written beside the appends (StartCompaction): the records
// appended meanwhile go on to the old generation and are carried into the new one
// when it is switched to; a crash before the switch (the disk copied as it was) finds
// them all in the old one, and drops the new snapshot that has no journal yet.
TEST(JournalFileTest, RecordsAppendedWhileTheSnapshotIsWrittenReachTheNextGeneration) {
  testing::TempDir dir, crashed;
  std::vector<Update> replay;
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  DispatcherState s;
  for (const Update& u : {Update(Create("job", 200, 10, 2, 3)), Update(AddConsumer{"job", "c1"}),
                          Update(AddConsumer{"job", "c2"})}) {
    MustApply(s, u);
    ASSERT_TRUE((*j)->Append(u).ok());
  }
  s = RandomWalk(j->get(), std::move(s), 200, 11, false);
  (*j)->StartCompaction(s);
  ASSERT_TRUE((*j)->compacting());
  (*j)->StartCompaction(s);  // one at a time: nothing
  const uint64_t before = s.applied();
  s = RandomWalk(j->get(), std::move(s), 200, 12, false);
  ASSERT_GT(s.applied(), before) << "records must be appended while the snapshot is written";
  (*j)->TEST_WaitForSnapshot();
  EXPECT_EQ((*j)->generation(), 0u) << "not switched before FinishCompaction";
  for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
    std::filesystem::copy(entry.path(), crashed.path() + "/" + entry.path().filename().string());
  EXPECT_TRUE(WorkDirFiles(crashed.path()).count("snapshot-1"));
  const std::string at_crash = s.DebugString();
  ASSERT_TRUE((*j)->FinishCompaction().ok());
  EXPECT_FALSE((*j)->compacting());
  EXPECT_EQ((*j)->generation(), 1u);
  EXPECT_GT((*j)->records_since_snapshot(), 0u) << "the records appended meanwhile are in journal-1";
  EXPECT_GT((*j)->snapshot_records(), 0u);
  s = RandomWalk(j->get(), std::move(s), 100, 13, false);
  j->reset();
  {
    DispatcherState r;
    auto j2 = Journal::Open(dir.path(), &replay, &r);
    ASSERT_TRUE(j2.ok()) << j2.status().ToString();
    EXPECT_EQ((*j2)->generation(), 1u);
    EXPECT_EQ(r.DebugString(), s.DebugString());
  }
  {
    DispatcherState r;
    auto j2 = Journal::Open(crashed.path(), &replay, &r);
    ASSERT_TRUE(j2.ok()) << j2.status().ToString();
    EXPECT_EQ((*j2)->generation(), 0u);
    EXPECT_EQ(r.DebugString(), at_crash);
    EXPECT_FALSE(WorkDirFiles(crashed.path()).count("snapshot-1")) << "a snapshot without its journal goes";
  }
}

// A journal closed while its compaction's snapshot is being written waits for it and
// removes it (no journal beside it); the next start reads the old generation whole.
TEST(JournalFileTest, AJournalClosedMidCompactionKeepsTheOldGeneration) {
  testing::TempDir dir;
  std::vector<Update> replay;
  DispatcherState s;
  {
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_TRUE(j.ok());
    for (int i = 0; i < 50; ++i) {
      const Update u = RegisterWorker{"w" + std::to_string(i), "a"};
      MustApply(s, u);
      ASSERT_TRUE((*j)->Append(u).ok());
    }
    (*j)->StartCompaction(s);
    const Update u = RegisterWorker{"late", "a"};
    MustApply(s, u);
    ASSERT_TRUE((*j)->Append(u).ok());
  }
  EXPECT_FALSE(WorkDirFiles(dir.path()).count("snapshot-1"));
  DispatcherState r;
  auto j = Journal::Open(dir.path(), &replay, &r);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)->generation(), 0u);
  EXPECT_EQ(r.DebugString(), s.DebugString());
}

// The same rules for the work dir's identity: a state-id that fails its checksum, or
// one that stands without a journal, or a format 4 journal without one, is DataLoss.
TEST(JournalFileTest, TheStateIdIsCheckedLikeTheJournal) {
  std::vector<Update> replay;
  {
    testing::TempDir dir;
    WriteJournalOf(dir.path(), 2);
    std::string id = testing::ReadFile(dir.path() + "/state-id");
    ASSERT_EQ(id.size(), 26u);
    id[5] = id[5] == 'a' ? 'b' : 'a';  // still 16 hex digits: only the checksum tells
    testing::WriteFile(dir.path() + "/state-id", id);
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_FALSE(j.ok());
    EXPECT_EQ(j.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(j.status().message().find("state-id: offset"), std::string::npos) << j.status().ToString();
    EXPECT_EQ(testing::ReadFile(dir.path() + "/state-id"), id);
  }
  {
    testing::TempDir dir;
    WriteJournalOf(dir.path(), 2);
    std::filesystem::remove(dir.path() + "/journal-0");
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_FALSE(j.ok()) << "a new journal beside the old identity: clients would take lost jobs for finished";
    EXPECT_EQ(j.status().code(), StatusCode::kDataLoss);
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/journal-0"));
  }
  {
    testing::TempDir dir;
    WriteJournalOf(dir.path(), 2);
    std::filesystem::remove(dir.path() + "/state-id");
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_FALSE(j.ok());
    EXPECT_EQ(j.status().code(), StatusCode::kDataLoss);
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/state-id"));
  }
  {
    testing::TempDir dir;
    WriteJournalOf(dir.path(), 2);
    testing::WriteFile(dir.path() + "/journal-0", "");  // truncated to nothing, its identity beside it
    auto j = Journal::Open(dir.path(), &replay);
    ASSERT_FALSE(j.ok());
    EXPECT_NE(j.status().message().find("truncated"), std::string::npos) << j.status().ToString();
  }
  // A new work dir whose first start crashed before its identity was written: the
  // empty journal is taken as new, and the identity made.
  testing::TempDir dir;
  testing::WriteFile(dir.path() + "/journal-0", "");
  auto j = Journal::Open(dir.path(), &replay);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)->state_id().size(), 16u);
}

}  // namespace
}  // namespace ferry::dispatch
