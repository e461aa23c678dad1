// A job's listing facts (lib/data/job_listing.h): the dispatcher fills in the sample
// count and fingerprint from the dataset, and a worker that lists the dataset
// differently refuses to serve it, naming the dataset.
#include "data/job_listing.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "testutil.h"

namespace ferry {
namespace {

TEST(JobListingTest, ListingFillsInTheFacts) {
  testing::TempDir dir;
  testing::MakeImageFolder(dir.path(), 2, 3);
  JobSpec job;
  job.dataset = dir.path();
  Result<JobSpec> listed = ListJob(job);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(listed->num_samples, 6);
  auto ds = OpenDataset(dir.path());
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(listed->fingerprint, JobFingerprint((*ds)->fingerprint(), job.pipeline));
  EXPECT_TRUE(CheckListing(*listed, **ds).ok());
}

TEST(JobListingTest, AWorkerThatListsOtherwiseRefuses) {
  testing::TempDir a, b;
  testing::MakeImageFolder(a.path(), 2, 3);
  testing::MakeImageFolder(b.path(), 2, 4);
  JobSpec job;
  job.dataset = a.path();
  Result<JobSpec> listed = ListJob(job);
  ASSERT_TRUE(listed.ok());
  auto other = OpenDataset(b.path());
  ASSERT_TRUE(other.ok());
  const Status s = CheckListing(*listed, **other);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(a.path()), std::string::npos) << s.ToString();
  // The same count but other files: the fingerprint tells.
  testing::TempDir c;
  testing::MakeImageFolder(c.path(), 2, 3, /*seed=*/99);
  testing::WriteFile(c / "class_0/extra.jpg", testing::EncodeJpeg(32, 32, 1));
  std::remove((c / "class_1/img_0000.jpg").c_str());
  auto third = OpenDataset(c.path());
  ASSERT_TRUE(third.ok());
  ASSERT_EQ((*third)->size(), 6);
  EXPECT_EQ(CheckListing(*listed, **third).code(), StatusCode::kFailedPrecondition);
  // Facts left at 0 are not checked (a point-to-point client that gave none).
  JobSpec unknown = job;
  EXPECT_TRUE(CheckListing(unknown, **other).ok());
}

TEST(JobListingTest, SyntheticJobsAreBounded) {
  JobSpec job;
  job.dataset = "synthetic:";
  job.num_samples = 1000;
  EXPECT_TRUE(ListJob(job).ok());
  job.num_samples = 0;
  EXPECT_EQ(ListJob(job).status().code(), StatusCode::kInvalidArgument);
  job.num_samples = kMaxSyntheticSamples + 1;
  EXPECT_EQ(ListJob(job).status().code(), StatusCode::kInvalidArgument);
}

TEST(JobListingTest, AMissingDatasetIsAnError) {
  JobSpec job;
  job.dataset = "/nonexistent/ferry/dataset";
  EXPECT_FALSE(ListJob(job).ok());
}

}  // namespace
}  // namespace ferry
