// Client::Connect's checks of its options (include/ferry/client.h), made before any
// connection: what it refuses, and why, without a worker or dispatcher running.
#include <gtest/gtest.h>

#include <string>

#include "ferry/client.h"

namespace ferry {
namespace {

ClientOptions PointToPoint() {
  ClientOptions o;
  o.workers = {"127.0.0.1:1"};
  o.job.dataset = "/data";
  return o;
}

ClientOptions Dispatched() {
  ClientOptions o;
  o.dispatcher = "127.0.0.1:1";
  o.job_name = "run";
  o.job.dataset = "/data";
  return o;
}

void ExpectRefused(const ClientOptions& o, const std::string& why) {
  auto c = Client::Connect(o);
  ASSERT_FALSE(c.ok()) << why;
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << why << ": " << c.status().ToString();
}

TEST(ConnectTest, RefusesOptionsThatCannotWork) {
  ClientOptions o = PointToPoint();
  o.dispatcher = "127.0.0.1:2";
  ExpectRefused(o, "both workers and a dispatcher");
  o = PointToPoint();
  o.workers.clear();
  ExpectRefused(o, "neither");
  o = PointToPoint();
  o.workers = {"no-port"};
  ExpectRefused(o, "not HOST:PORT");
  o = PointToPoint();
  o.job.batch_size = 0;
  ExpectRefused(o, "batch size 0");
  o = PointToPoint();
  o.credits = 0;
  ExpectRefused(o, "no credits");
  o = PointToPoint();
  o.job.ordering = Ordering::kDeterministic;
  ExpectRefused(o, "deterministic order needs a dispatcher");
  o = PointToPoint();
  o.job.mode = ProcessingMode::kParallelEpochs;
  ExpectRefused(o, "parallel_epochs needs a dispatcher");
  o = Dispatched();
  o.job_name.clear();
  ExpectRefused(o, "a dispatcher job needs a name");
  o = Dispatched();
  o.job_name = "two words";
  ExpectRefused(o, "names hold no whitespace");
  o = Dispatched();
  o.resume_state = "not a state";
  ExpectRefused(o, "a state that does not parse");
  o = Dispatched();
  o.resume_state = "ferry-iterator-state 1\njob other\nconsumer c\nfirst_open 0\n";
  ExpectRefused(o, "a state of another job");
  o = Dispatched();
  o.job.mode = ProcessingMode::kParallelEpochs;
  o.resume_state = "ferry-iterator-state 1\njob run\nconsumer c\nfirst_open 0\n";
  ExpectRefused(o, "parallel_epochs has no state to resume");
}

TEST(ConnectTest, AResumedStateBringsItsJobAndConsumer) {
  ClientOptions o = Dispatched();
  o.job_name.clear();
  o.resume_state = "ferry-iterator-state 1\njob run\nconsumer trainer-3\nfirst_open 2\ndone 2 5\n";
  auto c = Client::Connect(o);  // nothing listens on port 1: the control loop retries
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)->consumer_id(), "trainer-3");
  const IteratorState st = (*c)->SaveState();
  EXPECT_EQ(st.job, "run");
  EXPECT_EQ(st.first_open, 2u);
  EXPECT_EQ(st.done.size(), 1u);
}

TEST(ConnectTest, PointToPointHasNoDispatcherJob) {
  auto c = Client::Connect(PointToPoint());
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE((*c)->JobInfo(0.01).has_value());
  EXPECT_EQ((*c)->consumer_id(), "ferry-client");
}

}  // namespace
}  // namespace ferry
