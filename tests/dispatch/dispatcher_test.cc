// The dispatcher's rules (lib/dispatch/dispatcher.h) with no sockets: requests go in as
// the control plane's structs and the clock is the test's. Liveness, joining and
// creating jobs, garbage collection, the idle exit, reported workers, draining and
// leaving, durability (NeedsSync) and a restart that replays the journal.
#include "dispatch/dispatcher.h"
#include "dispatch/journal_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <filesystem>

#include <set>
#include <string>
#include <tuple>

#include "dispatch_test_util.h"
#include "testutil.h"

namespace ferry::dispatch {
namespace {

constexpr int kInterval = 100, kTimeout = 1000;

DispatcherConfig Config(const std::string& dir, bool exit_when_idle = false) {
  DispatcherConfig c;
  c.work_dir = dir;
  c.heartbeat_interval_ms = kInterval;
  c.heartbeat_timeout_ms = kTimeout;
  c.lease.max_outstanding = 2;
  c.exit_when_idle = exit_when_idle;
  c.sync = false;
  return c;
}

// 40 samples, batches of 10, 1 batch a split: 4 splits an epoch.
wire::GetOrCreateJobMsg Request(const std::string& consumer, int64_t epochs = 1) {
  wire::GetOrCreateJobMsg m;
  m.job.name = "job";
  m.job.job.dataset = "/data/train";
  m.job.job.batch_size = 10;
  m.job.job.batches_per_split = 1;
  m.job.job.epochs = epochs;
  m.consumer_id = consumer;
  return m;
}

JobSpec Listed(const wire::GetOrCreateJobMsg& m) {
  JobSpec s = m.job.job;
  s.num_samples = 40;
  s.fingerprint = 777;
  return s;
}

class DispatcherTest : public ::testing::Test {
 protected:
  std::unique_ptr<Dispatcher> Open(bool exit_when_idle = false, int64_t now = 0) {
    auto d = Dispatcher::Open(Config(dir_.path(), exit_when_idle), now);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? std::move(*d) : nullptr;
  }

  // Creates the job for `consumer` (the listing done by the test).
  static void CreateJob(Dispatcher& d, const std::string& consumer, int64_t epochs = 1) {
    const wire::GetOrCreateJobMsg m = Request(consumer, epochs);
    auto join = d.GetOrCreateJob(m);
    ASSERT_TRUE(join.ok()) << join.status().ToString();
    ASSERT_EQ(join->kind, Dispatcher::JoinResult::kNeedsListing);
    auto created = d.CreateJob(m, Listed(m));
    ASSERT_TRUE(created.ok()) << created.status().ToString();
  }

  static std::vector<wire::LeaseMsg> NewLeases(Dispatcher& d, const std::string& worker, int64_t now) {
    auto r = d.Heartbeat({worker, false, true, false, {}, {}}, now);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::vector<wire::LeaseMsg> out = r->leases;
    out.resize(r->new_leases);
    return out;
  }

  testing::TempDir dir_;
};

TEST_F(DispatcherTest, HeartbeatsLeaseAheadAndRestateWhatIsHeld) {
  auto d = Open();
  EXPECT_EQ(*d->RegisterWorker({"w1", "10.0.0.1:7000"}, 0), uint32_t(kInterval));
  CreateJob(*d, "c1");
  auto r = d->Heartbeat({"w1", false, true, false, {}, {}}, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->known);
  EXPECT_EQ(r->new_leases, 2u) << "leases ahead, up to the policy's 2";
  ASSERT_EQ(r->jobs.size(), 1u);
  EXPECT_EQ(r->jobs[0].name, "job");
  EXPECT_EQ(r->jobs[0].job.num_samples, 40) << "the job with its listing facts";
  // The next reply has nothing new but restates both held splits.
  r = d->Heartbeat({"w1", false, true, false, {}, {}}, 20);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->new_leases, 0u);
  EXPECT_EQ(r->leases.size(), 2u);
  // An unknown worker is told to register.
  r = d->Heartbeat({"nobody", false, true, false, {}, {}}, 20);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->known);
}

// A worker that names the digest its job came with is sent the job's name only; a
// wrong digest (another job under that name, or a dispatcher that encodes it otherwise)
// gets the whole spec again, and so does a worker after a restart of the dispatcher.
TEST_F(DispatcherTest, AJobTheWorkerHasGoesByName) {
  uint64_t digest = 0;
  {
    auto d = Open();
    ASSERT_TRUE(d->RegisterWorker({"w1", "10.0.0.1:7000"}, 0).ok());
    CreateJob(*d, "c1");
    auto r = d->Heartbeat({"w1", false, true, false, {}, {}}, 10);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->jobs.size(), 1u);
    digest = r->jobs[0].digest;
    EXPECT_NE(digest, 0u);
    EXPECT_TRUE(r->same_jobs.empty());
    wire::HeartbeatMsg h{"w1", false, true, false, {}, {}};
    h.have_jobs["job"] = digest;
    r = d->Heartbeat(h, 20);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->jobs.empty()) << "restated although the worker has it";
    EXPECT_EQ(r->same_jobs, std::vector<std::string>{"job"});
    EXPECT_EQ(r->leases.size(), 2u) << "the leases are restated whole all the same";
    h.have_jobs["job"] = digest + 1;
    r = d->Heartbeat(h, 30);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->jobs.size(), 1u) << "a digest that is not the job's gets the job";
    EXPECT_EQ(r->jobs[0].digest, digest);
    EXPECT_TRUE(r->same_jobs.empty());
    ASSERT_TRUE(d->Sync().ok());
  }
  auto d = Open(false, 100);  // the same job, replayed: the same digest
  wire::HeartbeatMsg h{"w1", false, true, false, {}, {}};
  h.have_jobs["job"] = digest;
  auto r = d->Heartbeat(h, 110);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->same_jobs, std::vector<std::string>{"job"});
}

TEST_F(DispatcherTest, JoiningAndCreatingJobs) {
  auto d = Open();
  const wire::GetOrCreateJobMsg first = Request("c1");
  auto a = d->GetOrCreateJob(first);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kind, Dispatcher::JoinResult::kNeedsListing);
  auto b = d->GetOrCreateJob(Request("c2"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->kind, Dispatcher::JoinResult::kBusy) << "one listing at a time: the other waits";
  auto created = d->CreateJob(first, Listed(first));
  ASSERT_TRUE(created.ok());
  EXPECT_EQ(created->job.num_samples, 40);
  auto c = d->GetOrCreateJob(Request("c2"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind, Dispatcher::JoinResult::kJoined);
  EXPECT_EQ(c->job.job.fingerprint, 777u);
  EXPECT_EQ(d->state().job("job")->consumers, (std::vector<std::string>{"c1", "c2"}));
  // Another configuration under the same name is refused with the reason.
  wire::GetOrCreateJobMsg other = Request("c3");
  other.job.job.seed = 5;
  EXPECT_EQ(d->GetOrCreateJob(other).status().code(), StatusCode::kFailedPrecondition);
  // Nameless or invalid requests.
  wire::GetOrCreateJobMsg bad = Request("");
  EXPECT_EQ(d->GetOrCreateJob(bad).status().code(), StatusCode::kInvalidArgument);
  bad = Request("c4");
  bad.job.job.batch_size = 0;
  EXPECT_EQ(d->GetOrCreateJob(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DispatcherTest, ARankedJobIsJoinedByItsRanks) {
  auto d = Open();
  wire::GetOrCreateJobMsg m = Request("trainer");
  m.job.job.num_consumers = 2;
  m.job.job.last_batch = LastBatch::kPad;
  EXPECT_EQ(d->GetOrCreateJob(m).status().code(), StatusCode::kInvalidArgument) << "not a rank's id";
  m.consumer_id = "rank-2";
  EXPECT_EQ(d->GetOrCreateJob(m).status().code(), StatusCode::kInvalidArgument) << "no rank 2 of 2";
  m.consumer_id = "rank-1";
  ASSERT_EQ(d->GetOrCreateJob(m)->kind, Dispatcher::JoinResult::kNeedsListing);
  ASSERT_TRUE(d->CreateJob(m, Listed(m)).ok());
  m.consumer_id = "rank-0";
  auto joined = d->GetOrCreateJob(m);
  ASSERT_TRUE(joined.ok());
  EXPECT_EQ(joined->job.job.num_consumers, 2);
  m.job.job.num_consumers = 4;
  EXPECT_EQ(d->GetOrCreateJob(m).status().code(), StatusCode::kFailedPrecondition) << "another world size";
}

// A restarted rank that lost its state would take unequal steps from the others: it is
// refused with the reason, while a rank that restores a state, and one that has read
// nothing yet, join.
TEST_F(DispatcherTest, ARankWithNoStateIsRefusedOnceItHasReadPartOfTheJob) {
  auto d = Open();
  wire::GetOrCreateJobMsg m = Request("rank-0");
  m.job.job.num_consumers = 2;
  m.job.job.last_batch = LastBatch::kPad;
  m.fresh = true;
  ASSERT_EQ(d->GetOrCreateJob(m)->kind, Dispatcher::JoinResult::kNeedsListing);
  ASSERT_TRUE(d->CreateJob(m, Listed(m)).ok());
  EXPECT_TRUE(d->GetOrCreateJob(m).ok()) << "nothing read yet: a restart is harmless";
  ASSERT_TRUE(d->AckSplits({"job", "rank-0", {{0, 0}}}).ok());
  auto refused = d->GetOrCreateJob(m);
  ASSERT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("load_state_dict"), std::string::npos) << refused.status().ToString();
  m.fresh = false;
  EXPECT_TRUE(d->GetOrCreateJob(m).ok()) << "with a saved state to restore";
  m.consumer_id = "rank-1";
  m.fresh = true;
  EXPECT_TRUE(d->GetOrCreateJob(m).ok()) << "rank 1 has read nothing";
}

TEST_F(DispatcherTest, AFailedListingCanBeRetried) {
  auto d = Open();
  const wire::GetOrCreateJobMsg m = Request("c1");
  ASSERT_EQ(d->GetOrCreateJob(m)->kind, Dispatcher::JoinResult::kNeedsListing);
  auto failed = d->CreateJob(m, Result<JobSpec>(Status::NotFound("no such dataset /data/train")));
  EXPECT_EQ(failed.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(d->state().job("job"), nullptr);
  EXPECT_EQ(d->GetOrCreateJob(m)->kind, Dispatcher::JoinResult::kNeedsListing) << "not stuck as being created";
}

TEST_F(DispatcherTest, ASilentWorkersSplitsGoToAnother) {
  auto d = Open();
  ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 0).ok());
  ASSERT_TRUE(d->RegisterWorker({"w2", "b:1"}, 0).ok());
  CreateJob(*d, "c1");
  const auto held = NewLeases(*d, "w1", 10);
  ASSERT_EQ(held.size(), 2u);
  // w2 keeps heartbeating; w1 falls silent.
  for (int64_t t = 100; t <= 1200; t += 100) {
    (void)d->Heartbeat({"w2", false, /*want_leases=*/false, false, {}, {}}, t);
    d->Tick(t, {"job"});
  }
  EXPECT_EQ(d->state().workers().count("w1"), 0u) << "removed after the heartbeat timeout";
  EXPECT_EQ(d->stats().workers_removed, 1);
  EXPECT_EQ(d->stats().returned, 2) << "both of w1's splits went back";
  std::set<SplitId> again;
  for (const auto& l : NewLeases(*d, "w2", 1300)) again.insert({l.epoch, l.split});
  for (const auto& l : held) EXPECT_TRUE(again.count({l.epoch, l.split})) << "split " << l.split << " re-leased";
}

TEST_F(DispatcherTest, AReportedWorkerGoesOnlyIfItAlsoMissedAHeartbeat) {
  auto d = Open();
  ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 0).ok());
  CreateJob(*d, "c1");
  ASSERT_EQ(NewLeases(*d, "w1", 0).size(), 2u);
  // Heard from just now: a client's report alone does not kill it.
  std::vector<std::string> after = d->ReportWorker("a:1", 50);
  EXPECT_EQ(after, std::vector<std::string>{"a:1"});
  // Quiet for longer than an interval: the report removes it at once.
  after = d->ReportWorker("a:1", kInterval + 100);
  EXPECT_TRUE(after.empty());
  EXPECT_EQ(d->state().LeasesOf("w1").size(), 0u);
}

// Hybrid: a trainer's own worker is listed only to its trainer, and survives a restart
// (the journal keeps whom it serves).
TEST_F(DispatcherTest, AWorkerServingOneConsumerIsListedOnlyToIt) {
  auto d = Open();
  ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 0).ok());
  ASSERT_TRUE(d->RegisterWorker({"local", "127.0.0.1:9", "job", "c1"}, 0).ok());
  EXPECT_EQ(d->Workers("job", "c1"), (std::vector<std::string>{"127.0.0.1:9", "a:1"}));
  EXPECT_EQ(d->Workers("job", "c2"), std::vector<std::string>{"a:1"});
  EXPECT_EQ(d->Workers(), std::vector<std::string>{"a:1"});
  ASSERT_TRUE(d->Sync().ok());
  d.reset();
  d = Open();
  EXPECT_EQ(d->Workers("job", "c1"), (std::vector<std::string>{"127.0.0.1:9", "a:1"}));
  EXPECT_EQ(d->Workers("other", "c1"), std::vector<std::string>{"a:1"});
}

TEST_F(DispatcherTest, DrainingTakesNoLeasesAndLeavingReturnsTheRest) {
  auto d = Open();
  ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 0).ok());
  CreateJob(*d, "c1");
  ASSERT_EQ(NewLeases(*d, "w1", 0).size(), 2u);
  ASSERT_TRUE(d->AckSplits({"job", "c1", {{0, 0}}}).ok());
  auto r = d->Heartbeat({"w1", true, false, false, {}, {}}, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->new_leases, 0u);
  EXPECT_EQ(r->leases.size(), 1u) << "it still serves what it holds";
  EXPECT_TRUE(d->Workers().empty()) << "clients are not sent to a draining worker";
  r = d->Heartbeat({"w1", true, false, /*leaving=*/true, {}, {}}, 20);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->known);
  EXPECT_EQ(d->state().workers().count("w1"), 0u);
  EXPECT_EQ(d->stats().returned, 1) << "the split it still held";
}

// ferry-ctl drain: by id or address, journaled at once (no new leases), then the
// worker's next heartbeat tells it to drain until it says it is.
TEST_F(DispatcherTest, AnOperatorDrainsAWorkerByIdOrAddress) {
  auto d = Open();
  ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 0).ok());
  ASSERT_TRUE(d->RegisterWorker({"w2", "b:1"}, 0).ok());
  CreateJob(*d, "c1");
  EXPECT_EQ(d->DrainWorker("nobody:1", 5).status().code(), StatusCode::kNotFound);
  auto status = d->DrainWorker("a:1", 5);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  for (const auto& w : status->workers) EXPECT_EQ(w.draining, w.id == "w1") << w.id;
  ASSERT_TRUE(d->DrainWorker("w1", 6).ok()) << "again, by id: no change";
  auto r = d->Heartbeat({"w1", false, true, false, {}, {}}, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->drain);
  EXPECT_EQ(r->new_leases, 0u) << "a drained worker takes no leases";
  EXPECT_EQ(d->Workers(), std::vector<std::string>{"b:1"});
  r = d->Heartbeat({"w1", /*draining=*/true, true, false, {}, {}}, 20);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->drain) << "it drains: no need to say it again";
  ASSERT_TRUE(d->Sync().ok());
  d.reset();
  d = Open();
  EXPECT_TRUE(d->state().workers().at("w1").draining) << "journaled";
  ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 30).ok());
  EXPECT_TRUE(d->state().workers().at("w1").draining) << "the same process registering again stays drained";
  ASSERT_TRUE(d->RegisterWorker({"w1", "c:1"}, 40).ok());
  EXPECT_FALSE(d->state().workers().at("w1").draining) << "a new process under that id starts afresh";
}

TEST_F(DispatcherTest, DrainByAddressNeedsOneWorkerThereAndSparesTrainersOwnCores) {
  auto d = Open();
  CreateJob(*d, "c1");
  // A worker restarted at the same address under a new id, the old one not yet dead.
  ASSERT_TRUE(d->RegisterWorker({"old", "a:1"}, 0).ok());
  ASSERT_TRUE(d->RegisterWorker({"new", "a:1"}, 0).ok());
  auto both = d->DrainWorker("a:1", 5);
  EXPECT_EQ(both.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(both.status().message().find("by its id"), std::string::npos) << both.status().ToString();
  EXPECT_FALSE(d->state().workers().at("old").draining);
  // An id that is also some worker's address: the id wins.
  ASSERT_TRUE(d->RegisterWorker({"b:1", "x:1"}, 0).ok());
  ASSERT_TRUE(d->RegisterWorker({"other", "b:1"}, 0).ok());
  ASSERT_TRUE(d->DrainWorker("b:1", 6).ok());
  EXPECT_TRUE(d->state().workers().at("b:1").draining);
  EXPECT_FALSE(d->state().workers().at("other").draining);
  // A trainer's own cores (hybrid) stop with their trainer, not by an operator.
  ASSERT_TRUE(d->RegisterWorker({"local", "l:1", "job", "c1"}, 0).ok());
  auto hybrid = d->DrainWorker("local", 7);
  EXPECT_EQ(hybrid.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(hybrid.status().message().find("trainer"), std::string::npos) << hybrid.status().ToString();
}

// A consumer's ack past the next epoch would make the state hold whole epochs (and
// the journal replay them at every start): refused at the request.
TEST_F(DispatcherTest, AcksOfEpochsNotYetOpenAreRefused) {
  auto d = Open();
  CreateJob(*d, "c1", /*epochs=*/0);
  EXPECT_TRUE(d->AckSplits({"job", "c1", {{1, 0}}}).ok()) << "one epoch ahead: leases reach it";
  auto far = d->AckSplits({"job", "c1", {{uint64_t(1) << 30, 0}}});
  EXPECT_EQ(far.status().code(), StatusCode::kOutOfRange) << far.status().ToString();
  EXPECT_LE(d->state().job("job")->epochs.size(), 2u);
}

TEST_F(DispatcherTest, FinishedJobsNobodyUsesAreCollected) {
  auto d = Open();
  ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 0).ok());
  CreateJob(*d, "c1");
  for (int round = 0; round < 4; ++round) {
    for (const auto& l : NewLeases(*d, "w1", round)) ASSERT_TRUE(d->AckSplits({"job", "c1", {{l.epoch, l.split}}}).ok());
  }
  auto st = d->GetJobStatus({"job", "c1", 0});
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->finished);
  d->Tick(100, {"job"});
  EXPECT_NE(d->state().job("job"), nullptr) << "a connection still uses it";
  d->Tick(200, {});
  EXPECT_EQ(d->state().job("job"), nullptr);
  EXPECT_EQ(d->GetJobStatus({"job", "c1", 0}).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(d->Idle()) << "a job ran and every job has finished";
}

TEST_F(DispatcherTest, IdleExitWaitsForTheWorkersToBeTold) {
  auto d = Open(/*exit_when_idle=*/true);
  EXPECT_FALSE(d->Idle()) << "no job has run yet";
  ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 0).ok());
  CreateJob(*d, "c1");
  // Two rounds of two leases each: the whole epoch, acknowledged after w1's last heartbeat.
  for (int round = 0; round < 2; ++round) {
    for (const auto& l : NewLeases(*d, "w1", round)) ASSERT_TRUE(d->AckSplits({"job", "c1", {{l.epoch, l.split}}}).ok());
  }
  d->Tick(100, {"job"});
  EXPECT_TRUE(d->Idle());
  EXPECT_FALSE(d->ShouldExit()) << "w1 has not heard yet";
  auto r = d->Heartbeat({"w1", false, true, false, {}, {}}, 150);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->idle);
  d->Tick(200, {"job"});
  EXPECT_TRUE(d->ShouldExit());
}

TEST_F(DispatcherTest, IdleExitGivesUpOnSilentWorkersAfterATimeout) {
  auto d = Open(/*exit_when_idle=*/true);
  ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 0).ok());
  ASSERT_TRUE(d->RegisterWorker({"w2", "b:1"}, 0).ok());
  CreateJob(*d, "c1");
  for (int round = 0; round < 4; ++round) {
    for (const auto& l : NewLeases(*d, "w1", round)) ASSERT_TRUE(d->AckSplits({"job", "c1", {{l.epoch, l.split}}}).ok());
  }
  (void)d->Heartbeat({"w1", false, true, false, {}, {}}, 10);
  d->Tick(20, {"job"});
  EXPECT_FALSE(d->ShouldExit()) << "w2 was not told";
  (void)d->Heartbeat({"w2", false, false, false, {}, {}}, 20);  // w2 hears it
  (void)d->Heartbeat({"w1", false, true, false, {}, {}}, 20);
  d->Tick(30, {"job"});
  EXPECT_TRUE(d->ShouldExit());
}

TEST_F(DispatcherTest, ChangesNeedASyncAndSurviveARestart) {
  {
    auto d = Open();
    EXPECT_FALSE(d->NeedsSync());
    ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 0).ok());
    EXPECT_TRUE(d->NeedsSync()) << "a reply that depends on it waits for the journal";
    ASSERT_TRUE(d->Sync().ok());
    EXPECT_FALSE(d->NeedsSync());
    CreateJob(*d, "c1");
    ASSERT_EQ(NewLeases(*d, "w1", 0).size(), 2u);
    ASSERT_TRUE(d->AckSplits({"job", "c1", {{0, 0}}}).ok());
    ASSERT_TRUE(d->Sync().ok());
    // A heartbeat that changes nothing needs no sync.
    (void)d->Heartbeat({"w1", false, /*want_leases=*/false, false, {}, {}}, 1);
    EXPECT_FALSE(d->NeedsSync());
  }
  auto d = Open(false, /*now=*/5000);
  EXPECT_GT(d->stats().replayed, 0);
  ASSERT_NE(d->state().job("job"), nullptr);
  EXPECT_EQ(d->state().LeasesOf("w1").at("job").size(), 1u) << "the lease not acknowledged survives";
  // The replayed worker gets a full timeout from the restart to come back.
  d->Tick(5000 + kTimeout - 1, {"job"});
  EXPECT_EQ(d->state().workers().count("w1"), 1u);
  d->Tick(5000 + kTimeout + 1, {"job"});
  EXPECT_EQ(d->state().workers().count("w1"), 0u);
}

// A journal that cannot be written (a full disk; here the file size limit) used to
// abort the process. Now the group commit whose write fails sends none of its
// replies, changes are refused with the reason from then on, reads and heartbeats go
// on, and once writes work again the queued records are written and changes
// accepted; a restart replays all of it.
TEST_F(DispatcherTest, AJournalThatCannotBeWrittenRefusesChangesAndRecovers) {
  ::signal(SIGXFSZ, SIG_IGN);
  const std::string journal = dir_.path() + "/journal-0";
  {
    auto d = Open();
    ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 0).ok());
    CreateJob(*d, "c1");
    ASSERT_EQ(NewLeases(*d, "w1", 0).size(), 2u);
    ASSERT_TRUE(d->Sync().ok());
    rlimit old{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    rlimit full = old;
    full.rlim_cur = rlim_t(std::filesystem::file_size(journal));
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &full), 0);
    // Two acks in one group commit: taken, their records written by the commit.
    auto ack = d->AckSplits({"job", "c1", {{0, 0}}});
    auto second = d->AckSplits({"job", "c1", {{0, 1}}});
    const bool synced = d->Sync().ok();
    auto status = d->GetJobStatus({"job", "c1", 0});
    auto beat = d->Heartbeat({"w1", false, true, false, {}, {}}, 10);
    auto late = d->RegisterWorker({"w2", "b:1"}, 10);
    d->Tick(20, {"job"});  // a retry, still full
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
    EXPECT_TRUE(ack.ok()) << ack.status().ToString();
    EXPECT_TRUE(second.ok()) << second.status().ToString();
    EXPECT_FALSE(synced) << "the replies waiting on a commit that could not be written must not go out";
    EXPECT_FALSE(d->NeedsSync()) << "reads go out without waiting for the journal";
    ASSERT_TRUE(status.ok()) << status.status().ToString();
    ASSERT_TRUE(beat.ok()) << beat.status().ToString();
    EXPECT_EQ(beat->new_leases, 0u) << "no new leases while the journal is down";
    EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(late.status().message().find("cannot write its journal"), std::string::npos) << late.status().ToString();
    EXPECT_EQ(d->state().workers().count("w2"), 0u) << "a refused change is not applied";
    // Room again: the next tick writes the queued acks; changes are taken.
    d->Tick(2000, {"job"});
    auto retry = d->RegisterWorker({"w2", "b:1"}, 2000);
    ASSERT_TRUE(retry.ok()) << retry.status().ToString();
    ASSERT_TRUE(d->Sync().ok());
  }
  ::signal(SIGXFSZ, SIG_DFL);
  auto d = Open(false, 5000);
  const EpochState& e = d->state().job("job")->epochs.at(0);
  EXPECT_EQ(e.status[0], SplitStatus::kDone) << "the acks of the commit that failed were written after";
  EXPECT_EQ(e.status[1], SplitStatus::kDone);
  EXPECT_EQ(d->state().workers().count("w2"), 1u);
}

// Case 4: a worker that cannot serve a job (its dataset is missing there) kept taking
// its leases, and its streams refused them, failing every consumer. Now it says so in
// its heartbeats: what it holds returns, it takes nothing more of the job, clients are
// not sent to it, and when no worker can serve the job the client is told why.
TEST_F(DispatcherTest, AWorkerThatCannotServeAJobTakesNoneOfIt) {
  auto d = Open();
  ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 0).ok());
  ASSERT_TRUE(d->RegisterWorker({"w2", "b:1"}, 0).ok());
  CreateJob(*d, "c1");
  ASSERT_EQ(NewLeases(*d, "w1", 0).size(), 2u);
  wire::HeartbeatMsg unfit{"w1", false, true, false, {}, {{"job", "/data/train: no such directory"}}};
  auto r = d->Heartbeat(unfit, 10);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->new_leases, 0u);
  EXPECT_TRUE(r->leases.empty()) << "what it held went back";
  EXPECT_TRUE(d->state().LeasesOf("w1").empty());
  EXPECT_EQ(d->Workers("job", "c1"), (std::vector<std::string>{"b:1"})) << "clients are sent to w2 only";
  EXPECT_EQ(NewLeases(*d, "w2", 20).size(), 2u) << "w2 takes the returned splits";
  EXPECT_EQ(d->Workers("", ""), (std::vector<std::string>{"a:1", "b:1"})) << "unfit for that job only";
  unfit.worker_id = "w2";
  unfit.unfit_jobs["job"] = "listing differs (fingerprint 1 != 777)";
  ASSERT_TRUE(d->Heartbeat(unfit, 30).ok());
  auto none = d->WorkersFor("job", "c1");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("no such directory"), std::string::npos) << none.status().ToString();
  EXPECT_NE(none.status().message().find("fingerprint"), std::string::npos) << none.status().ToString();
  // w1's dataset is mounted: fit again, it leases.
  EXPECT_EQ(NewLeases(*d, "w1", 40).size(), 2u);
  auto listed = d->WorkersFor("job", "c1");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, (std::vector<std::string>{"a:1"}));
}

TEST_F(DispatcherTest, RestoreReopensAndStatusListsMySplits) {
  auto d = Open();
  ASSERT_TRUE(d->RegisterWorker({"w1", "a:1"}, 0).ok());
  CreateJob(*d, "c1");
  std::vector<int64_t> mine;
  for (const auto& l : NewLeases(*d, "w1", 0)) mine.push_back(l.split);
  auto st = d->GetJobStatus({"job", "c1", 0});
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->my_splits, mine);
  EXPECT_FALSE(st->epoch_fully_assigned);
  ASSERT_TRUE(d->AckSplits({"job", "c1", {{0, mine[0]}, {0, mine[1]}}}).ok());
  auto r = d->RestoreConsumer({"job", "c1", 0, {{0, mine[0]}}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->first_open, 0u);
  // The split acknowledged after the saved state is to be delivered again.
  std::set<int64_t> again;
  for (const auto& l : NewLeases(*d, "w1", 1)) again.insert(l.split);
  EXPECT_TRUE(again.count(mine[1]));
  EXPECT_FALSE(again.count(mine[0]));
}

// A work dir of an older Ferry (journal format 1: no magic, 8-byte record headers,
// hand-kept varints): Open replays it and rewrites the state as a format 4 snapshot at
// once (format 4 records cannot follow format 1 ones in one file), keeping the file it
// read as journal-0.replaced until the next start, which reads format 4 only.
TEST_F(DispatcherTest, AJournalOfFormatOneIsUpgradedOnOpen) {
  // Format 1's RegisterWorker: tag 3, then the id and the address, each a varint length and its bytes.
  testing::WriteFile(dir_.path() + "/journal-0",
                     test::FormatOneJournal({std::string("\x03\x02w0\x05" "a:100", 10),
                                             std::string("\x03\x02w1\x05" "b:200", 10)}));
  {
    auto d = Open();
    ASSERT_NE(d, nullptr);
    ASSERT_EQ(d->state().workers().size(), 2u);
    EXPECT_EQ(d->state().workers().at("w1").address, "b:200");
  }
  namespace fs = std::filesystem;
  EXPECT_FALSE(fs::exists(dir_.path() + "/journal-0")) << "generation 0 was left";
  EXPECT_TRUE(fs::exists(dir_.path() + "/journal-0.replaced")) << "the source, kept until the next start";
  ASSERT_TRUE(fs::exists(dir_.path() + "/snapshot-1"));
  EXPECT_EQ(testing::ReadFile(dir_.path() + "/snapshot-1").compare(0, 8, "FERRYJ4\n"), 0);
  EXPECT_EQ(testing::ReadFile(dir_.path() + "/journal-1"), internal::FileHeader(internal::kFileHeaderSize));
  auto again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->state().workers().size(), 2u);
  EXPECT_EQ(again->state().workers().at("w0").address, "a:100");
  EXPECT_FALSE(fs::exists(dir_.path() + "/journal-0.replaced")) << "a successful start removes it";
}

// Each sync's header covers the sync before it; a tick with no sync since the last
// (idle) seals the journal, so that a crash after it leaves no record past the
// committed length.
TEST_F(DispatcherTest, AnIdleTickSealsTheJournal) {
  DispatcherConfig c = Config(dir_.path());
  c.sync = true;
  auto d = Dispatcher::Open(c, 0);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_TRUE((*d)->RegisterWorker({"w1", "a:1"}, 0).ok());
  ASSERT_TRUE((*d)->Sync().ok());
  EXPECT_FALSE((*d)->journal().sealed()) << "the header covers the sync before this one";
  (*d)->Tick(10, {});
  EXPECT_FALSE((*d)->journal().sealed()) << "a sync since the last tick: not idle yet";
  (*d)->Tick(20, {});
  EXPECT_TRUE((*d)->journal().sealed());
}

}  // namespace
}  // namespace ferry::dispatch
