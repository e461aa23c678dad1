// A worker's link to its dispatcher (lib/worker/dispatcher_link.h) against a fake
// dispatcher: LinkOptions::call answers each request frame as a dispatcher would, with
// real encoded replies, and records what the worker sent. No sockets. The link runs
// its own loop (10 ms heartbeats): the tests wait for heartbeats by condition, with
// a bound, and never sleep.
#include "worker/dispatcher_link.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "core/mutex.h"
#include "testutil.h"
#include "wire/control.h"
#include "wire/wire_test_util.h"

namespace ferry {
namespace {

using wire::MessageType;

class FakeDispatcher {
 public:
  // The reply to the next heartbeats (a copy each time), as the test sets it.
  void SetReply(wire::HeartbeatOkMsg r) {
    MutexLock lock(&mu_);
    reply_ = std::move(r);
  }
  // Heartbeats fail (a dispatcher down) while set.
  void SetDown(bool down) {
    MutexLock lock(&mu_);
    down_ = down;
  }
  Result<wire::InFrame> Call(const wire::OutFrame& out) {
    const wire::InFrame f = wire::test::ToInFrame(out);
    MutexLock lock(&mu_);
    if (down_) return Status::Unavailable("dispatcher down");
    if (f.header.type == MessageType::kRegisterWorker) {
      ++registrations_;
      return wire::test::ToInFrame(wire::EncodeRegisterWorkerOk(10));
    }
    Result<wire::HeartbeatMsg> h = wire::DecodeHeartbeat(f);
    EXPECT_TRUE(h.ok());
    if (!h.ok()) return h.status();
    heartbeats_.push_back(*h);
    return wire::test::ToInFrame(wire::EncodeHeartbeatOk(reply_));
  }
  int registrations() {
    MutexLock lock(&mu_);
    return registrations_;
  }
  size_t heartbeats() {
    MutexLock lock(&mu_);
    return heartbeats_.size();
  }
  wire::HeartbeatMsg last() {
    MutexLock lock(&mu_);
    return heartbeats_.back();
  }
  // Waits until `n` more heartbeats have been answered.
  bool AwaitHeartbeats(size_t n) {
    const size_t want = heartbeats() + n;
    return testing::WaitFor([&] { return heartbeats() >= want; }, 30);
  }

 private:
  Mutex mu_;
  wire::HeartbeatOkMsg reply_ GUARDED_BY(mu_);
  bool down_ GUARDED_BY(mu_) = false;
  int registrations_ GUARDED_BY(mu_) = 0;
  std::vector<wire::HeartbeatMsg> heartbeats_ GUARDED_BY(mu_);
};

class DispatcherLinkTest : public ::testing::Test {
 protected:
  void Start(std::function<Result<std::shared_ptr<const Dataset>>(const std::string&)> open = nullptr) {
    LinkOptions o;
    o.dispatcher = "fake:1";
    o.worker_id = "w1";
    o.advertise = "127.0.0.1:1";
    o.data.dataset = open ? open : [](const std::string&) -> Result<std::shared_ptr<const Dataset>> {
      return std::shared_ptr<const Dataset>(MakeSyntheticDataset(40));
    };
    o.call = [this](const wire::OutFrame& f) { return fake_.Call(f); };
    link_ = std::make_unique<DispatcherLink>(std::move(o));
    link_->Start();
  }

  static wire::NamedJob Job(const std::string& name, int64_t samples = 40) {
    wire::NamedJob j;
    j.name = name;
    j.job.dataset = "/data/" + name;
    j.job.num_samples = samples;
    j.job.batch_size = 4;
    return j;
  }

  FakeDispatcher fake_;
  std::unique_ptr<DispatcherLink> link_;
};

TEST_F(DispatcherLinkTest, LeasesInARepliedHeartbeatReachTheirConsumersFeeds) {
  Start();
  wire::HeartbeatOkMsg r;
  r.jobs = {Job("j")};
  r.leases = {{"j", 0, 3, "c0"}, {"j", 0, 5, "c0"}, {"j", 1, 0, "c1"}};
  fake_.SetReply(r);
  ASSERT_TRUE(fake_.AwaitHeartbeats(2));
  EXPECT_EQ(fake_.registrations(), 1);
  EXPECT_TRUE(link_->registered());
  EXPECT_EQ(link_->held(), 3u);
  ASSERT_NE(link_->Job("j"), nullptr);
  EXPECT_TRUE(link_->Job("j")->status.ok());
  EXPECT_EQ(link_->Feed("j", "c0")->held(), 2u);
  EXPECT_EQ(link_->Feed("j", "c1")->held(), 1u);
  // The next reply restates what is held: a split acknowledged is gone from the feed.
  r.leases = {{"j", 0, 5, "c0"}};
  fake_.SetReply(r);
  ASSERT_TRUE(fake_.AwaitHeartbeats(2));
  EXPECT_EQ(link_->Feed("j", "c0")->held(), 1u);
  EXPECT_EQ(link_->Feed("j", "c1")->held(), 0u);
}

// The worker names the digest each job came with; a reply that then names the job
// without its spec (same_jobs) keeps it open and its leases served. A job this worker
// could not open is never named so (it gets the spec again, to retry).
TEST_F(DispatcherLinkTest, AJobSentOnceIsThenNamedByItsDigest) {
  Start();
  using Have = std::map<std::string, uint64_t>;
  wire::HeartbeatOkMsg r;
  r.jobs = {Job("j")};
  r.jobs[0].digest = 42;
  r.leases = {{"j", 0, 3, "c0"}};
  fake_.SetReply(r);
  ASSERT_TRUE(testing::WaitFor([&] { return fake_.heartbeats() > 0 && fake_.last().have_jobs == Have{{"j", 42}}; }, 30));
  const auto opened = link_->Job("j");
  ASSERT_NE(opened, nullptr);
  r.jobs.clear();
  r.same_jobs = {"j"};
  r.leases = {{"j", 0, 3, "c0"}, {"j", 0, 4, "c0"}};
  fake_.SetReply(r);
  ASSERT_TRUE(testing::WaitFor([&] { return link_->Feed("j", "c0")->held() == 2u; }, 30));
  ASSERT_TRUE(fake_.AwaitHeartbeats(3));
  EXPECT_EQ(link_->Job("j"), opened) << "the job was opened again";
  EXPECT_EQ(link_->Feed("j", "c0")->held(), 2u);
  EXPECT_EQ(fake_.last().have_jobs, (Have{{"j", 42}}));
  // A new spec under the name (another digest): opened from it, and named by it.
  r.jobs = {Job("j")};
  r.jobs[0].job.batch_size = 8;
  r.jobs[0].digest = 43;
  r.same_jobs.clear();
  fake_.SetReply(r);
  ASSERT_TRUE(testing::WaitFor([&] { return fake_.last().have_jobs == Have{{"j", 43}}; }, 30));
  ASSERT_NE(link_->Job("j"), nullptr);
  EXPECT_EQ(link_->Job("j")->spec.batch_size, 8);
}

TEST_F(DispatcherLinkTest, AWorkerTheDispatcherForgotRegistersAgainAndHoldsNothing) {
  Start();
  wire::HeartbeatOkMsg r;
  r.jobs = {Job("j")};
  r.leases = {{"j", 0, 1, "c0"}};
  fake_.SetReply(r);
  ASSERT_TRUE(fake_.AwaitHeartbeats(2));
  EXPECT_EQ(link_->held(), 1u);
  wire::HeartbeatOkMsg unknown;
  unknown.known = false;
  fake_.SetReply(unknown);
  ASSERT_TRUE(testing::WaitFor([&] { return fake_.registrations() >= 2; }, 30));
  EXPECT_EQ(link_->Feed("j", "c0")->held(), 0u) << "presumed dead: its splits are someone else's";
}

TEST_F(DispatcherLinkTest, ADispatcherThatFailsIsRegisteredWithAgain) {
  Start();
  ASSERT_TRUE(fake_.AwaitHeartbeats(1));
  fake_.SetDown(true);
  ASSERT_TRUE(testing::WaitFor([&] { return !link_->registered(); }, 30));
  fake_.SetDown(false);
  ASSERT_TRUE(testing::WaitFor([&] { return fake_.registrations() >= 2 && link_->registered(); }, 30));
}

TEST_F(DispatcherLinkTest, AJobThisWorkerCannotOpenIsReportedWithItsReasonOnceThenByName) {
  Start([](const std::string& path) -> Result<std::shared_ptr<const Dataset>> {
    return Status::NotFound("no such dataset: " + path);
  });
  wire::HeartbeatOkMsg r;
  r.jobs = {Job("j")};
  fake_.SetReply(r);
  ASSERT_TRUE(fake_.AwaitHeartbeats(2));
  ASSERT_NE(link_->Job("j"), nullptr);
  EXPECT_EQ(link_->Job("j")->status.code(), StatusCode::kNotFound);
  // Once the dispatcher has the reason, later heartbeats name the job only.
  r.jobs.clear();
  fake_.SetReply(r);
  ASSERT_TRUE(fake_.AwaitHeartbeats(2));
  const wire::HeartbeatMsg h = fake_.last();
  ASSERT_EQ(h.unfit_jobs.count("j"), 1u);
  EXPECT_EQ(h.unfit_jobs.at("j"), "");
  // The dispatcher says the job is gone: the worker forgets it.
  r.gone_jobs = {"j"};
  fake_.SetReply(r);
  ASSERT_TRUE(fake_.AwaitHeartbeats(2));
  EXPECT_EQ(link_->Job("j"), nullptr);
  EXPECT_EQ(link_->jobs_known(), 0u);
  EXPECT_EQ(fake_.last().unfit_jobs.count("j"), 0u);
}

TEST_F(DispatcherLinkTest, AWantedJobIsAskedForUntilTheDispatcherNamesIt) {
  Start();
  ASSERT_TRUE(fake_.AwaitHeartbeats(1));
  link_->Want("j");
  ASSERT_TRUE(fake_.AwaitHeartbeats(2));
  EXPECT_EQ(fake_.last().want_jobs, std::vector<std::string>{"j"});
  wire::HeartbeatOkMsg r;
  r.jobs = {Job("j")};
  fake_.SetReply(r);
  ASSERT_TRUE(fake_.AwaitHeartbeats(2));
  ASSERT_NE(link_->Job("j"), nullptr);
  EXPECT_TRUE(fake_.last().want_jobs.empty());
}

TEST_F(DispatcherLinkTest, DrainingHeartbeatsAskForNoLeasesAndLeavingSaysSo) {
  Start();
  ASSERT_TRUE(fake_.AwaitHeartbeats(1));
  EXPECT_TRUE(fake_.last().want_leases);
  link_->SetDraining();
  ASSERT_TRUE(fake_.AwaitHeartbeats(2));
  EXPECT_TRUE(fake_.last().draining);
  EXPECT_FALSE(fake_.last().want_leases);
  EXPECT_TRUE(link_->WaitDrained(10)) << "the dispatcher says it holds nothing";
  link_->Leave();
  EXPECT_TRUE(fake_.last().leaving);
}

}  // namespace
}  // namespace ferry
