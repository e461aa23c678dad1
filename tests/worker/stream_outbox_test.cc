// What a worker's stream sends and when (lib/worker/stream_outbox.h), with no socket:
// batches wait for credits and EndOfEpochs do not, epochs close with EndOfEpoch (the
// last one marked) on epoch streams only, and each way a stream can end gets its own
// last frame.
#include "worker/stream_outbox.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "wire/codec.h"
#include "wire/wire_test_util.h"

namespace ferry {
namespace {

using wire::MessageType;

// A stand-in for an encoded batch: any frame that needs a credit will do.
wire::OutFrame BatchFrame() { return wire::EncodeCredit(7); }

BatchProvenance Prov(uint64_t epoch, int64_t batch, bool last) {
  BatchProvenance p;
  p.epoch = epoch;
  p.batch_in_epoch = batch;
  p.last_in_epoch = last;
  return p;
}

std::vector<MessageType> Types(const std::vector<wire::OutFrame>& frames) {
  std::vector<MessageType> out;
  for (const auto& f : frames) out.push_back(f.type());
  return out;
}

TEST(StreamOutboxTest, BatchesWaitForCreditsEndOfEpochDoesNot) {
  StreamOutbox o;
  o.SetSource(/*splits=*/false, /*last_epoch=*/1);
  o.AddBatch(BatchFrame(), Prov(0, 0, false), 4);
  o.AddBatch(BatchFrame(), Prov(0, 1, true), 3);
  o.AddBatch(BatchFrame(), Prov(1, 0, true), 4);
  EXPECT_TRUE(o.TakeSendable().frames.empty()) << "no credit yet";
  o.Grant(2);
  StreamOutbox::Sendable s = o.TakeSendable();
  EXPECT_EQ(Types(s.frames), (std::vector<MessageType>{MessageType::kCredit, MessageType::kCredit,
                                                       MessageType::kEndOfEpoch}))
      << "the EndOfEpoch behind the second batch needs no credit";
  EXPECT_EQ(s.batches, 2);
  EXPECT_EQ(o.credits(), 0);
  EXPECT_EQ(o.queued(), 2u);
  o.Grant(5);
  s = o.TakeSendable();
  ASSERT_EQ(s.frames.size(), 2u);
  auto last = wire::DecodeEndOfEpoch(wire::test::ToInFrame(s.frames[1]));
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->epoch, 1u);
  EXPECT_TRUE(last->last);
  EXPECT_EQ(last->samples, 4);
  EXPECT_FALSE(o.Final(Status::OK(), false).has_value()) << "the final EndOfEpoch went out already";
}

TEST(StreamOutboxTest, EndOfEpochCountsTheEpochsBatchesAndSamples) {
  StreamOutbox o;
  o.SetSource(false, -1);
  o.Grant(10);
  o.AddBatch(BatchFrame(), Prov(3, 0, false), 4);
  o.AddBatch(BatchFrame(), Prov(3, 1, false), 0);  // every file bad: still sent
  o.AddBatch(BatchFrame(), Prov(3, 2, true), 2);
  const auto s = o.TakeSendable();
  ASSERT_EQ(s.frames.size(), 4u);
  auto e = wire::DecodeEndOfEpoch(wire::test::ToInFrame(s.frames[3]));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->epoch, 3u);
  EXPECT_EQ(e->batches, 3);
  EXPECT_EQ(e->samples, 6);
  EXPECT_FALSE(e->last) << "a stream that runs forever has no last epoch";
}

TEST(StreamOutboxTest, SplitStreamsSendNoEndOfEpoch) {
  StreamOutbox o;
  o.SetSource(/*splits=*/true, -1);
  o.Grant(3);
  o.AddBatch(BatchFrame(), Prov(0, 9, true), 4);
  EXPECT_EQ(Types(o.TakeSendable().frames), std::vector<MessageType>{MessageType::kCredit});
}

Status FinalStatus(const StreamOutbox& o, const Status& source, bool draining) {
  std::optional<wire::OutFrame> f = o.Final(source, draining);
  if (!f) return Status::OK();
  const wire::InFrame in = wire::test::ToInFrame(*f);
  if (in.header.type == MessageType::kEndOfEpoch) return Status::OutOfRange("final EndOfEpoch");
  auto e = wire::DecodeError(in);
  return e.ok() ? e->status : e.status();
}

TEST(StreamOutboxTest, HowAStreamEnds) {
  StreamOutbox epochs;
  epochs.SetSource(false, 2);
  EXPECT_EQ(FinalStatus(epochs, Status::DataLoss("disk"), false).code(), StatusCode::kDataLoss) << "its source failed";
  EXPECT_EQ(FinalStatus(epochs, Status::OK(), true).code(), StatusCode::kUnavailable)
      << "a drain cut the epochs short: the client goes elsewhere";
  EXPECT_EQ(FinalStatus(epochs, Status::OK(), false).code(), StatusCode::kOutOfRange)
      << "the final EndOfEpoch, if the source ended without one";

  StreamOutbox splits;
  splits.SetSource(true, -1);
  EXPECT_EQ(FinalStatus(splits, Status::OK(), false).code(), StatusCode::kCancelled)
      << "a newer stream of the consumer took the feed over";
  EXPECT_EQ(FinalStatus(splits, Status::OK(), true).code(), StatusCode::kUnavailable) << "drained";

  StreamOutbox synthetic;
  synthetic.SetSource(false, -1);
  synthetic.AddFrame(wire::EncodeEndOfEpoch({0, 1, 1, true}), false, /*final_end_of_epoch=*/true);
  EXPECT_TRUE(FinalStatus(synthetic, Status::OK(), true).ok()) << "its last epoch was whole: nothing more to say";
}

}  // namespace
}  // namespace ferry
