// Read-ahead (lib/data/read_ahead.h): planned samples are fetched by the stage's own
// threads, many at once and bounded in bytes, and taken by ReadSample without waiting
// the fetch's latency again; errors pass through; nothing is read twice.
#include "data/read_ahead.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace ferry {
namespace {

// A dataset whose every read takes `latency` (a request to a store far away), of
// samples of `sample_bytes` bytes ("<index>" repeated); sample 13 is a 403.
class SlowDataset final : public Dataset {
 public:
  SlowDataset(int64_t n, std::chrono::milliseconds latency, uint64_t sample_bytes)
      : n_(n), latency_(latency), sample_bytes_(sample_bytes), reads_(size_t(n)) {}
  int64_t size() const override { return n_; }
  int32_t Label(int64_t i) const override { return int32_t(i % 7); }
  std::string Path(int64_t i) const override { return "s3://b/" + std::to_string(i); }
  Status ReadSample(int64_t i, std::string* out) const override {
    const int now = ++in_flight_;
    int seen = max_in_flight_.load();
    while (now > seen && !max_in_flight_.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(latency_);
    --in_flight_;
    reads_[size_t(i)].fetch_add(1);
    if (i == 13) return Status::PermissionDenied(Path(i) + ": HTTP 403 AccessDenied");
    *out = Bytes(i);
    return Status::OK();
  }
  uint64_t SizeHint(int64_t) const override { return sample_bytes_; }
  const std::vector<std::string>& classes() const override { return none_; }
  uint64_t fingerprint() const override { return 1; }
  const std::vector<ListingIssue>& listing_issues() const override { return issues_; }
  std::string_view kind() const override { return "image_folder"; }

  std::string Bytes(int64_t i) const {
    std::string b(sample_bytes_, '\0');
    const std::string tag = std::to_string(i);
    for (size_t k = 0; k < b.size(); ++k) b[k] = tag[k % tag.size()];
    return b;
  }
  int reads(int64_t i) const { return reads_[size_t(i)].load(); }
  int max_in_flight() const { return max_in_flight_.load(); }

 private:
  const int64_t n_;
  const std::chrono::milliseconds latency_;
  const uint64_t sample_bytes_;
  mutable std::vector<std::atomic<int>> reads_;
  mutable std::atomic<int> in_flight_{0}, max_in_flight_{0};
  const std::vector<std::string> none_;
  const std::vector<ListingIssue> issues_;
};

TEST(ReadAheadTest, PlannedSamplesAreFetchedManyAtOnceAndTakenWithoutWaiting) {
  auto slow = std::make_unique<SlowDataset>(200, std::chrono::milliseconds(50), 1000);
  SlowDataset* inner = slow.get();
  std::unique_ptr<Dataset> ds = WithReadAhead(std::move(slow), {16, uint64_t{1} << 20, 60});
  std::vector<int64_t> plan;
  for (int64_t i = 0; i < 200; ++i) plan.push_back(i);
  const auto t0 = std::chrono::steady_clock::now();
  ds->Prefetch(plan);
  std::string bytes;
  for (int64_t i = 0; i < 200; ++i) {
    const Status s = ds->ReadSample(i, &bytes);
    if (i == 13) {
      EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << "the store's error, as it came";
      continue;
    }
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(bytes, inner->Bytes(i)) << i;
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // 200 reads of 50 ms one after another take 10 s; 16 at a time, under a second
  // (asserted loosely: a shared machine).
  EXPECT_LT(took, 5.0);
  EXPECT_GE(inner->max_in_flight(), 8);
  for (int64_t i = 0; i < 200; ++i) EXPECT_EQ(inner->reads(i), 1) << "sample " << i << " read once";
  EXPECT_EQ(ds->Path(5), "s3://b/5");
  EXPECT_EQ(ds->Label(9), 2);
}

TEST(ReadAheadTest, FetchedBytesStayWithinTheBudget) {
  // 100 KB samples, a 300 KB budget: at most about 3 fetched and not taken at a time.
  auto slow = std::make_unique<SlowDataset>(60, std::chrono::milliseconds(2), 100000);
  SlowDataset* inner = slow.get();
  std::unique_ptr<Dataset> ds = WithReadAhead(std::move(slow), {16, 300000, 60});
  std::vector<int64_t> plan;
  for (int64_t i = 0; i < 60; ++i) plan.push_back(i);
  ds->Prefetch(plan);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // time to fetch everything, were it allowed
  int fetched = 0;
  for (int64_t i = 0; i < 60; ++i) fetched += inner->reads(i);
  EXPECT_LE(fetched, 3) << "fetched ahead beyond the budget";
  EXPECT_GE(fetched, 1);
  std::string bytes;
  for (int64_t i = 0; i < 60; ++i) {
    if (i == 13) continue;
    ASSERT_TRUE(ds->ReadSample(i, &bytes).ok());
    EXPECT_EQ(bytes.size(), 100000u);
  }
  for (int64_t i = 0; i < 60; ++i) EXPECT_LE(inner->reads(i), 1) << i;
}

TEST(ReadAheadTest, ASampleTakenBeforeItsFetchIsReadOnceAndUnplannedReadsGoStraightThrough) {
  auto slow = std::make_unique<SlowDataset>(50, std::chrono::milliseconds(30), 10);
  SlowDataset* inner = slow.get();
  std::unique_ptr<Dataset> ds = WithReadAhead(std::move(slow), {1, uint64_t{1} << 20, 60});
  std::vector<int64_t> plan;
  for (int64_t i = 0; i < 20; ++i) plan.push_back(i);
  ds->Prefetch(plan);
  std::string bytes;
  // The last planned one is far back in the queue of a one-request stage: taken first.
  ASSERT_TRUE(ds->ReadSample(19, &bytes).ok());
  EXPECT_EQ(bytes, inner->Bytes(19));
  ASSERT_TRUE(ds->ReadSample(40, &bytes).ok()) << "never planned";
  EXPECT_EQ(bytes, inner->Bytes(40));
  for (int64_t i = 0; i < 19; ++i) {
    if (i != 13) {
      ASSERT_TRUE(ds->ReadSample(i, &bytes).ok());
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(inner->reads(i), i == 13 ? inner->reads(13) : 1) << i;
  EXPECT_EQ(inner->reads(19), 1);
  // A sample planned twice (two epochs' plans) is fetched once per plan and taken twice.
  ds->Prefetch({30, 30});
  ASSERT_TRUE(ds->ReadSample(30, &bytes).ok());
  ASSERT_TRUE(ds->ReadSample(30, &bytes).ok());
  EXPECT_EQ(bytes, inner->Bytes(30));
  EXPECT_LE(inner->reads(30), 2);
}

TEST(ReadAheadTest, FetchedSamplesNobodyTakesAreDropped) {
  auto slow = std::make_unique<SlowDataset>(10, std::chrono::milliseconds(1), 1000);
  SlowDataset* inner = slow.get();
  std::unique_ptr<Dataset> ds = WithReadAhead(std::move(slow), {2, uint64_t{1} << 20, 0.2});
  ds->Prefetch({1, 2, 3});
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // kept 0.2 s, swept every 0.2 s
  std::string bytes;
  ASSERT_TRUE(ds->ReadSample(2, &bytes).ok());
  EXPECT_EQ(bytes, inner->Bytes(2));
  EXPECT_EQ(inner->reads(2), 2) << "dropped, so read again when taken";
}

}  // namespace
}  // namespace ferry
