// Placement (dispatch/placement.h): each job on about K workers, spread over the
// fleet, stable, refilled when a member goes, never on a worker that cannot serve it;
// and a lease decision looks only at the jobs placed on the worker.
#include "dispatch/placement.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "dispatch/decisions.h"
#include "dispatch_test_util.h"

namespace ferry::dispatch {
namespace placement_test {

using namespace ::ferry::dispatch::test;  // NOLINT

const auto kFit = [](const std::string&, const std::string&) { return false; };

TEST(PlacementTest, EachJobOnKWorkersSpreadOverTheFleet) {
  DispatcherState s;
  for (int w = 0; w < 12; ++w) MustApply(s, RegisterWorker{"w" + std::to_string(w), "a" + std::to_string(w)});
  for (int j = 0; j < 6; ++j) MustApply(s, Create("job" + std::to_string(j)));
  Placement p(2);
  p.Update(s, kFit);
  std::map<std::string, int> load;
  for (int j = 0; j < 6; ++j) {
    const auto& members = p.WorkersOf(*s.job("job" + std::to_string(j)));
    EXPECT_EQ(members.size(), 2u);
    for (const std::string& w : members) ++load[w];
  }
  EXPECT_EQ(load.size(), 12u) << "12 places over 12 workers: one each";
  for (const auto& [w, n] : load) {
    EXPECT_EQ(n, 1) << w;
    EXPECT_EQ(p.JobsOf(s, w).size(), 1u) << w;
  }
  // Stable: another update moves nothing.
  std::map<std::string, std::set<std::string>> before;
  for (int j = 0; j < 6; ++j) before["job" + std::to_string(j)] = p.WorkersOf(*s.job("job" + std::to_string(j)));
  MustApply(s, RegisterWorker{"w-new", "a-new"});
  p.Update(s, kFit);
  for (const auto& [job, members] : before) EXPECT_EQ(p.WorkersOf(*s.job(job)), members) << job;
}

TEST(PlacementTest, AMemberGoneOrUnfitIsReplacedAndWeightsCount) {
  DispatcherState s;
  for (int w = 0; w < 6; ++w) MustApply(s, RegisterWorker{"w" + std::to_string(w), "a" + std::to_string(w)});
  CreateJob heavy = Create("heavy");
  heavy.spec.weight = 2;
  MustApply(s, heavy);
  MustApply(s, Create("light"));
  Placement p(2);
  p.Update(s, kFit);
  EXPECT_EQ(p.WorkersOf(*s.job("heavy")).size(), 4u) << "weight 2: twice the workers";
  EXPECT_EQ(p.WorkersOf(*s.job("light")).size(), 2u);
  const std::string gone = *p.WorkersOf(*s.job("light")).begin();
  MustApply(s, RemoveWorker{gone});
  p.Update(s, kFit);
  EXPECT_EQ(p.WorkersOf(*s.job("light")).size(), 2u);
  EXPECT_FALSE(p.WorkersOf(*s.job("light")).count(gone));
  // A worker that cannot serve a job (its dataset is missing there) leaves it.
  const std::string unfit = *p.WorkersOf(*s.job("heavy")).begin();
  p.Update(s, [&](const std::string& w, const std::string& j) { return w == unfit && j == "heavy"; });
  EXPECT_FALSE(p.WorkersOf(*s.job("heavy")).count(unfit));
  EXPECT_EQ(p.WorkersOf(*s.job("heavy")).size(), 4u);
  // Fewer workers than asked: all of them.
  Placement wide(100);
  wide.Update(s, kFit);
  EXPECT_EQ(wide.WorkersOf(*s.job("light")).size(), s.workers().size());
}

TEST(PlacementTest, ADecisionLooksOnlyAtTheJobsPlacedOnTheWorker) {
  DispatcherState s;
  MustApply(s, RegisterWorker{"w1", "a"});
  MustApply(s, RegisterWorker{"w2", "b"});
  for (const char* j : {"x", "y"}) {
    MustApply(s, Create(j, 100, 10, 1, 1));
    MustApply(s, AddConsumer{j, "c"});
  }
  Placement p(1);
  p.Update(s, kFit);
  for (const char* w : {"w1", "w2"}) {
    const std::set<std::string> jobs = p.JobsOf(s, w);
    ASSERT_EQ(jobs.size(), 1u) << w;
    const std::vector<LeaseSplits> leases = DecideLeases(s, w, LeasePolicy{}, {}, &jobs);
    ASSERT_EQ(leases.size(), 1u) << w;
    EXPECT_EQ(leases[0].job, *jobs.begin()) << w;
  }
  EXPECT_NE(p.JobsOf(s, "w1"), p.JobsOf(s, "w2")) << "one job each";
  // Unplaced, every worker leases from every job.
  EXPECT_EQ(DecideLeases(s, "w1", LeasePolicy{}).size(), 2u);
}

TEST(PlacementTest, ASweepsLanesArePlacedTogether) {
  DispatcherState s;
  for (int w = 0; w < 8; ++w) MustApply(s, RegisterWorker{"w" + std::to_string(w), "a" + std::to_string(w)});
  for (const char* lane : {"sweep/a", "sweep/b", "sweep/c"}) {
    CreateJob c = Create(lane);
    c.spec.dataset = "/data/same";
    c.spec.sharing = Sharing::kEvery;
    MustApply(s, c);
  }
  Placement p(2);
  p.Update(s, kFit);
  const auto& a = p.WorkersOf(*s.job("sweep/a"));
  EXPECT_EQ(a.size(), 2u);
  EXPECT_EQ(p.WorkersOf(*s.job("sweep/b")), a);
  EXPECT_EQ(p.WorkersOf(*s.job("sweep/c")), a);
  EXPECT_EQ(p.JobsOf(s, *a.begin()), (std::set<std::string>{"sweep/a", "sweep/b", "sweep/c"}));
}

}  // namespace placement_test
}  // namespace ferry::dispatch
