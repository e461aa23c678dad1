// Tests of lib/pipeline/prepared_job.cc: a job compiled once, its batch source picked
// from the spec, its data opened by that source, and its checks in one place.
#include "pipeline/prepared_job.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "data/dataset.h"
#include "image/image_test_util.h"
#include "testutil.h"

namespace ferry {
namespace {

using testing::MakeImageFolder;
using testing::TempDir;

JobSpec Job(const std::string& dataset) {
  JobSpec j;
  j.dataset = dataset;
  j.batch_size = 4;
  j.pipeline = testing::Uint8Spec(16, /*rrc=*/true, /*hflip=*/0.5);
  return j;
}

TEST(PreparedJobTest, TheBatchSourceComesFromTheSpec) {
  auto decode = PreparedJob::Prepare(Job("/data/train"));
  ASSERT_TRUE(decode.ok()) << decode.status().ToString();
  EXPECT_EQ((*decode)->source(), BatchSource::kDecode);
  EXPECT_FALSE((*decode)->runs_python());
  EXPECT_EQ((*decode)->sample_bytes(), size_t(16 * 16 * 3));
  EXPECT_EQ((*decode)->sample_pipeline(), (*decode)->pipeline()) << "compiled once, and that one runs";

  JobSpec synthetic = Job("synthetic:");
  synthetic.num_samples = 100;
  EXPECT_EQ((*PreparedJob::Prepare(synthetic))->source(), BatchSource::kSynthetic);

  JobSpec then_python = Job("/data/train");
  then_python.user_code.payload = "pickled";
  then_python.user_code.input = "uint8";
  auto tp = PreparedJob::Prepare(then_python);
  ASSERT_TRUE(tp.ok()) << tp.status().ToString();
  EXPECT_EQ((*tp)->source(), BatchSource::kDecodeThenPython);
  EXPECT_TRUE((*tp)->runs_python());

  JobSpec user = Job("python:");
  user.num_samples = 10;
  user.user_code.payload = "pickled";
  auto u = PreparedJob::Prepare(user);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ((*u)->source(), BatchSource::kUserCode);
  EXPECT_EQ((*u)->sample_pipeline(), nullptr) << "Python makes the batches";
  EXPECT_EQ((*u)->sample_bytes(), 0u);
}

TEST(PreparedJobTest, EveryCheckThatNeedsNoDataIsMadeWhenPrepared) {
  JobSpec bad = Job("/data/train");
  bad.batch_size = 0;
  EXPECT_EQ(PreparedJob::Prepare(bad).status().code(), StatusCode::kInvalidArgument);
  bad = Job("/data/train");
  bad.pipeline.Add("hflip", R"({"p": 2})");
  EXPECT_EQ(PreparedJob::Prepare(bad).status().code(), StatusCode::kInvalidArgument);
  bad = Job("/data/train");
  bad.batch_size = 1 << 20;  // a batch over JobSpec::kMaxBatchBytes
  bad.pipeline = testing::Uint8Spec(512, /*rrc=*/true, /*hflip=*/0);
  const Status big = PreparedJob::Prepare(bad).status();
  EXPECT_NE(big.message().find("use a smaller batch_size"), std::string::npos) << big.ToString();
}

TEST(PreparedJobTest, DataIsOpenedByTheBatchSourceAndRefusedWhereThisProcessCannot) {
  TempDir tmp;
  MakeImageFolder(tmp / "imgs", 2, 3);
  DataOpeners none;  // opens nothing
  auto decode = *PreparedJob::Prepare(Job(tmp / "imgs"));
  EXPECT_EQ(decode->OpenData(none).status().code(), StatusCode::kUnimplemented);
  DataOpeners files;
  std::string opened;
  files.dataset = [&opened](const std::string& spec) -> Result<std::shared_ptr<const Dataset>> {
    opened = spec;
    FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, OpenDataset(spec));
    return std::shared_ptr<const Dataset>(std::move(ds));
  };
  auto ds = decode->OpenData(files);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(opened, tmp / "imgs");
  EXPECT_EQ((*ds)->size(), 6);
  EXPECT_TRUE(decode->CheckData(**ds).ok());

  JobSpec synthetic = Job("synthetic:");
  synthetic.num_samples = 100;
  auto syn = *PreparedJob::Prepare(synthetic);
  EXPECT_EQ(syn->OpenData(files).status().code(), StatusCode::kPermissionDenied) << "without allow_synthetic";
  files.allow_synthetic = true;
  auto sds = syn->OpenData(files);
  ASSERT_TRUE(sds.ok());
  EXPECT_EQ((*sds)->size(), 100);
  EXPECT_EQ((*sds)->sample_reads(), SampleReads::kNone);
  EXPECT_TRUE(syn->CheckData(**sds).ok());
  EXPECT_EQ(decode->CheckData(**sds).code(), StatusCode::kInternal) << "a decoded job given data with no bytes";

  JobSpec then_python = Job(tmp / "imgs");
  then_python.user_code.payload = "pickled";
  then_python.user_code.input = "uint8";
  const Status refused = (*PreparedJob::Prepare(then_python))->OpenData(files).status();
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.message().find("--allow-user-code"), std::string::npos) << refused.ToString();
  // Its code is loaded before its data is listed: an import error costs no listing.
  opened.clear();
  files.check_user_code = [](const JobSpec&) { return Status::FailedPrecondition("No module named 'mylib'"); };
  const Status failed = (*PreparedJob::Prepare(then_python))->OpenData(files).status();
  EXPECT_NE(failed.message().find("mylib"), std::string::npos);
  EXPECT_TRUE(opened.empty());
}

TEST(PreparedJobTest, TargetsAreCheckedAgainstTheData) {
  TempDir tmp;
  MakeImageFolder(tmp / "imgs", 2, 3);
  JobSpec j = Job(tmp / "imgs");
  j.targets = {"boxes", "labels"};
  j.pipeline = testing::Uint8Spec(16, /*rrc=*/false, /*hflip=*/0.5);
  auto prepared = PreparedJob::Prepare(j);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  auto ds = OpenDataset(tmp / "imgs");
  ASSERT_TRUE(ds.ok());
  const Status s = (*prepared)->CheckData(**ds);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("has no annotations"), std::string::npos) << s.ToString();
  j.targets = {"key"};  // any dataset has keys
  EXPECT_TRUE((*PreparedJob::Prepare(j))->CheckData(**ds).ok());
}

}  // namespace
}  // namespace ferry
