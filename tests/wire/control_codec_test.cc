// The control plane's codec (lib/wire/control.h): every request and reply round-trips,
// a job travels whole (the one JobSpec, also as the journal's bytes), and malformed
// control bodies are refused with a Status.
#include "wire/control.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <cstdint>

#include <random>
#include <string>
#include <vector>

#include "control.capnp.h"
#include "wire_test_util.h"

namespace ferry::wire {
namespace {

using namespace ::ferry::wire::test;  // NOLINT

JobSpec AJob() {
  JobSpec j;
  j.dataset = "/data/train";
  j.pipeline = PipelineSpec::ImagenetEval();
  j.seed = 99;
  j.shuffle = false;
  j.epochs = 0;
  j.batch_size = 17;
  j.last_batch = LastBatch::kDrop;
  j.mode = ProcessingMode::kParallelEpochs;
  j.ordering = Ordering::kDeterministic;
  j.batches_per_split = 3;
  j.weight = 2.5;
  j.priority = -3;
  j.num_samples = 1281167;
  j.fingerprint = 0xFEEDFACEull;
  return j;
}

TEST(ControlCodecTest, JobsTravelWhole) {
  const NamedJob job{"run7", AJob()};
  Result<GetOrCreateJobMsg> req = DecodeGetOrCreateJob(ToInFrame(EncodeGetOrCreateJob({job, "trainer-1"})));
  ASSERT_TRUE(req.ok()) << req.status().ToString();
  EXPECT_EQ(req->job, job);
  EXPECT_EQ(req->consumer_id, "trainer-1");
  Result<NamedJob> info = DecodeJobInfo(ToInFrame(EncodeJobInfo(job)));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(*info, job);
  // The journal's encoding of a job is the wire's.
  Result<JobSpec> back = DecodeJobBytes(EncodeJobBytes(job.job));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, job.job);
  EXPECT_FALSE(DecodeJobBytes("not a message").ok());
  EXPECT_FALSE(DecodeJobBytes(std::string(16, '\xff')).ok());
}

TEST(ControlCodecTest, WorkerMessagesRoundTrip) {
  Result<RegisterWorkerMsg> reg = DecodeRegisterWorker(ToInFrame(EncodeRegisterWorker({"w1", "10.0.0.5:7000"})));
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ(reg->worker_id, "w1");
  EXPECT_EQ(reg->address, "10.0.0.5:7000");
  EXPECT_FALSE(DecodeRegisterWorker(ToInFrame(EncodeRegisterWorker({"", "x:1"}))).ok()) << "an empty id";
  Result<uint32_t> interval = DecodeRegisterWorkerOk(ToInFrame(EncodeRegisterWorkerOk(250)));
  ASSERT_TRUE(interval.ok());
  EXPECT_EQ(*interval, 250u);

  HeartbeatMsg h{"w1", true, false, true, {"a", "b"}, {{"gone", "no such directory"}},
                 {100, 2, 3, 4, 5, {{"decode", 7000, 3}, {"rand_augment", 9000, 3}}, {{"run7", 123}, {"sweep/a", 4}}},
                 {{"run7", 0x1234567890abcdefull}, {"sweep/a", 1}}};
  Result<HeartbeatMsg> hb = DecodeHeartbeat(ToInFrame(EncodeHeartbeat(h)));
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->worker_id, "w1");
  EXPECT_TRUE(hb->draining);
  EXPECT_FALSE(hb->want_leases);
  EXPECT_TRUE(hb->leaving);
  EXPECT_EQ(hb->want_jobs, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(hb->unfit_jobs, (std::map<std::string, std::string>{{"gone", "no such directory"}}));
  EXPECT_EQ(hb->load, h.load);
  EXPECT_EQ(hb->have_jobs, h.have_jobs);
  h.load.ops.assign(300, {"op", 1, 1});  // past the bound: the encoder sends kMaxOpCosts
  Result<HeartbeatMsg> capped = DecodeHeartbeat(ToInFrame(EncodeHeartbeat(h)));
  ASSERT_TRUE(capped.ok()) << capped.status().ToString();
  EXPECT_EQ(capped->load.ops.size(), WorkerLoad::kMaxOpCosts);

  HeartbeatOkMsg ok;
  ok.leases = {{"run7", 2, 5, "c1"}, {"run7", 2, 6, "c2"}};
  ok.jobs = {{"run7", AJob(), nullptr, 77}};
  ok.same_jobs = {"sweep/a", "sweep/b"};
  ok.known = true;
  ok.new_leases = 1;
  ok.idle = true;
  ok.drain = true;
  Result<HeartbeatOkMsg> r = DecodeHeartbeatOk(ToInFrame(EncodeHeartbeatOk(ok)));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->leases, ok.leases);
  EXPECT_EQ(r->jobs, ok.jobs);
  ASSERT_EQ(r->jobs.size(), 1u);
  EXPECT_EQ(r->jobs[0].digest, 77u);
  EXPECT_EQ(r->same_jobs, ok.same_jobs);
  EXPECT_EQ(r->new_leases, 1u);
  EXPECT_TRUE(r->idle);
  EXPECT_TRUE(r->drain);
  ok.new_leases = 3;
  EXPECT_FALSE(DecodeHeartbeatOk(ToInFrame(EncodeHeartbeatOk(ok))).ok()) << "more new leases than leases";
}

TEST(ControlCodecTest, ClientMessagesRoundTrip) {
  Result<std::vector<std::string>> w = DecodeWorkerList(ToInFrame(EncodeWorkerList({"a:1", "b:2"})));
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_TRUE(DecodeGetWorkers(ToInFrame(EncodeGetWorkers())).ok());

  Result<AckSplitsMsg> ack =
      DecodeAckSplits(ToInFrame(EncodeAckSplits({"run7", "c1", {{0, 1}, {3, 9}}, {7000000, 9000000, 320}})));
  ASSERT_TRUE(ack.ok());
  EXPECT_EQ(ack->job, "run7");
  EXPECT_EQ(ack->consumer_id, "c1");
  EXPECT_EQ(ack->splits, (std::vector<SplitId>{{0, 1}, {3, 9}}));
  EXPECT_EQ(ack->load, (ConsumerLoad{7000000, 9000000, 320}));

  Result<GetJobStatusMsg> q = DecodeGetJobStatus(ToInFrame(EncodeGetJobStatus({"run7", "c1", 4, {1, 2, 3}})));
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->epoch, 4u);
  EXPECT_EQ(q->load, (ConsumerLoad{1, 2, 3}));
  Result<JobStatusMsg> st = DecodeJobStatus(ToInFrame(EncodeJobStatus({3, true, {1, 4, 7}, true})));
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->first_open, 3u);
  EXPECT_TRUE(st->finished);
  EXPECT_EQ(st->my_splits, (std::vector<int64_t>{1, 4, 7}));
  EXPECT_TRUE(st->epoch_fully_assigned);

  Result<RestoreConsumerMsg> rc = DecodeRestoreConsumer(ToInFrame(EncodeRestoreConsumer({"run7", "c1", 2, {{2, 0}}})));
  ASSERT_TRUE(rc.ok());
  EXPECT_EQ(rc->first_open, 2u);
  EXPECT_EQ(rc->done, (std::vector<SplitId>{{2, 0}}));
  Result<std::string> rep = DecodeReportWorker(ToInFrame(EncodeReportWorker("10.0.0.5:7000")));
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(*rep, "10.0.0.5:7000");
}

TEST(ControlCodecTest, BadJobsAreRefused) {
  for (int which = 0; which < 3; ++which) {
    capnp::MallocMessageBuilder b;
    auto job = b.initRoot<schema::JobInfo>().initJob();
    job.setName("x");
    auto j = job.initJob();
    j.setPipelineJson(which == 0 ? "{not json" : PipelineSpec::ImagenetTrain().ToJson());
    if (which == 1) j.setMode(schema::ProcessingMode(9));
    if (which == 2) j.setOrdering(schema::Ordering(4));
    const auto words = capnp::messageToFlatArray(b);
    const auto bytes = words.asBytes();
    const Status s = DecodeJobInfo(RawFrame(MessageType::kJobInfo, std::string(bytes.begin(), bytes.end()))).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << which << ": " << s.ToString();
  }
}

TEST(ControlCodecTest, BitFlipsOfRealControlFramesNeverCrash) {
  std::vector<OutFrame> frames;
  frames.push_back(EncodeHeartbeatOk({{{"j", 1, 2, "c"}}, {{"j", AJob()}}, true, 1, false}));
  frames.push_back(EncodeGetOrCreateJob({{"j", AJob()}, "c"}));
  frames.push_back(EncodeRestoreConsumer({"j", "c", 1, {{1, 2}, {1, 3}}}));
  std::mt19937_64 rng(11);
  for (const OutFrame& out : frames) {
    const std::string body = Flatten(out).substr(kFrameHeaderSize);
    for (int iter = 0; iter < 300; ++iter) {
      std::string b = body;
      for (int k = 0; k < 3; ++k) b[rng() % b.size()] ^= char(1 << (rng() % 8));
      const Status s = DecodeAs(out.type(), RawFrame(out.type(), b));
      if (!s.ok()) {
        EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
      }
    }
  }
}

}  // namespace
}  // namespace ferry::wire

namespace ferry::wire {
namespace {

TEST(ControlCodecTest, ClusterStatusRoundTrips) {
  EXPECT_TRUE(DecodeGetClusterStatus(ToInFrame(EncodeGetClusterStatus())).ok());
  ClusterStatusMsg m;
  m.state_id = "0123456789abcdef";
  m.journal_writable = false;
  m.workers.push_back({"w1", "10.0.0.5:7000", true, 3, 250, "job", "rank-1", {{"other", "no such directory"}}, 812.5,
                       1024.25});
  JobSummaryMsg j;
  j.name = "job";
  j.dataset = "/data/train";
  j.num_samples = 1281167;
  j.consumers = {"rank-0", "rank-1"};
  j.first_open = 2;
  j.epochs = 90;
  j.splits_per_epoch = 5005;
  j.pending = 10;
  j.leased = 8;
  j.done = 4987;
  j.ranks = 2;
  j.input_wait = 0.25;
  j.demand = 4000;
  j.recommended_workers = 5;
  j.limited_by = "workers: decode (80% of a sample's time)";
  m.jobs.push_back(j);
  Result<ClusterStatusMsg> back = DecodeClusterStatus(ToInFrame(EncodeClusterStatus(m)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->state_id, m.state_id);
  EXPECT_FALSE(back->journal_writable);
  ASSERT_EQ(back->workers.size(), 1u);
  const WorkerStatusMsg& w = back->workers[0];
  EXPECT_EQ(w.id, "w1");
  EXPECT_TRUE(w.draining);
  EXPECT_EQ(w.leases, 3u);
  EXPECT_EQ(w.silent_ms, 250);
  EXPECT_EQ(w.serves_consumer, "rank-1");
  EXPECT_EQ(w.unfit_jobs, m.workers[0].unfit_jobs);
  EXPECT_EQ(w.samples_per_second, 812.5);
  EXPECT_EQ(w.capacity, 1024.25);
  ASSERT_EQ(back->jobs.size(), 1u);
  const JobSummaryMsg& b = back->jobs[0];
  EXPECT_EQ(b.consumers, j.consumers);
  EXPECT_EQ(b.num_samples, j.num_samples);
  EXPECT_EQ(b.first_open, j.first_open);
  EXPECT_EQ(b.splits_per_epoch, j.splits_per_epoch);
  EXPECT_EQ(b.pending + b.leased + b.done, j.pending + j.leased + j.done);
  EXPECT_EQ(b.ranks, 2);
  EXPECT_EQ(b.input_wait, 0.25);
  EXPECT_EQ(b.demand, 4000);
  EXPECT_EQ(b.recommended_workers, 5);
  EXPECT_EQ(b.limited_by, j.limited_by);
  EXPECT_FALSE(DecodeClusterStatus(ToInFrame(EncodeGetClusterStatus())).ok()) << "a request is not a reply";
}

TEST(ControlCodecTest, DrainWorkerRoundTripsAndNamesAWorker) {
  Result<std::string> w = DecodeDrainWorker(ToInFrame(EncodeDrainWorker("10.0.0.7:7000")));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(*w, "10.0.0.7:7000");
  EXPECT_EQ(DecodeDrainWorker(ToInFrame(EncodeDrainWorker(""))).status().code(), StatusCode::kInvalidArgument);
}

TEST(ControlCodecTest, SplitSetsPackAndUnpack) {
  uint64_t x = 88172645463325252ull;
  auto next = [&] { return x ^= x << 13, x ^= x >> 7, x ^= x << 17; };
  std::vector<std::vector<int64_t>> sets = {{}, {0}, {5}, {0, 1, 2, 3}, {1, 4, 7, 10, 11, 100}, {int64_t(1) << 40}};
  for (int density : {2, 5, 50}) {
    std::vector<int64_t> s;
    for (int64_t v = 0; v < 100000; ++v)
      if (next() % uint64_t(density) == 0) s.push_back(v);
    sets.push_back(s);
  }
  for (const auto& s : sets) {
    std::optional<std::string> p = PackSplitSet(s);
    ASSERT_TRUE(p.has_value());
    auto back = UnpackSplitSet(p->data(), p->size(), size_t(1) << 22, int64_t(1) << 40);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*back, s);
  }
  // Not sorted, repeated or negative: not packed (the plain list carries them).
  EXPECT_FALSE(PackSplitSet({3, 1}).has_value());
  EXPECT_FALSE(PackSplitSet({1, 1}).has_value());
  EXPECT_FALSE(PackSplitSet({-1, 2}).has_value());
  EXPECT_FALSE(PackSplitSet({0, 36, INT64_MIN}).has_value()) << "no overflow (found by the dispatcher fuzzer)";
  EXPECT_FALSE(PackSplitSet({0, 36, INT64_MAX}).has_value());
  Result<JobStatusMsg> odd = DecodeJobStatus(ToInFrame(EncodeJobStatus({0, false, {7, -1, 3}, false})));
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(odd->my_splits, (std::vector<int64_t>{7, -1, 3}));
  RestoreConsumerMsg r{"j", "c", 1, {{1, 2}, {2, 0}, {1, 4}}};
  Result<RestoreConsumerMsg> rb = DecodeRestoreConsumer(ToInFrame(EncodeRestoreConsumer(r)));
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->done, (std::vector<SplitId>{{1, 2}, {1, 4}, {2, 0}})) << "packed by epoch, in order";
  r.done.push_back({3, -5});
  rb = DecodeRestoreConsumer(ToInFrame(EncodeRestoreConsumer(r)));
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->done, r.done) << "the plain list, as given";

  // A few hostile bytes do not unpack into gigabytes, or past a split number's range.
  auto bytes = [](std::initializer_list<int> b) {
    std::string out;
    for (int c : b) out.push_back(char(c));
    return out;
  };
  const std::string bomb = bytes({0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f});  // one run of 2^32 splits
  EXPECT_EQ(UnpackSplitSet(bomb.data(), bomb.size(), size_t(1) << 22, int64_t(1) << 40).status().code(),
            StatusCode::kInvalidArgument);
  const std::string far = bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0});
  EXPECT_FALSE(UnpackSplitSet(far.data(), far.size(), size_t(1) << 22, int64_t(1) << 40).ok());
  const std::string wide = bytes({0, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x21});  // steps of 2^35, 34 splits: past 2^40
  EXPECT_FALSE(UnpackSplitSet(wide.data(), wide.size(), size_t(1) << 22, int64_t(1) << 40).ok());
  const std::string cut = bytes({0, 0x80});
  EXPECT_FALSE(UnpackSplitSet(cut.data(), cut.size(), size_t(1) << 22, int64_t(1) << 40).ok());
  const std::string overlong = std::string(10, '\xff') + bytes({1, 0, 0});
  EXPECT_FALSE(UnpackSplitSet(overlong.data(), overlong.size(), size_t(1) << 22, int64_t(1) << 40).ok());
}

}  // namespace
}  // namespace ferry::wire
