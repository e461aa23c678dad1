// Helpers shared by the dataset tests (tests/data/*_test.cc): opening a dataset that
// must open, and reading back its listing.
#ifndef FERRY_TESTS_DATA_DATA_TEST_UTIL_H_
#define FERRY_TESTS_DATA_DATA_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace ferry::testing {

inline std::unique_ptr<Dataset> MustOpen(Result<std::unique_ptr<Dataset>> r) {
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  return std::move(r).value();
}

inline std::vector<std::string> AllPaths(const Dataset& ds) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < ds.size(); ++i) out.push_back(ds.Path(i));
  return out;
}

inline std::vector<int32_t> AllLabels(const Dataset& ds) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < ds.size(); ++i) out.push_back(ds.Label(i));
  return out;
}

inline bool HasIssue(const Dataset& ds, const std::string& path, const std::string& reason_part) {
  for (const ListingIssue& issue : ds.listing_issues()) {
    if (issue.path == path && issue.reason.find(reason_part) != std::string::npos) return true;
  }
  return false;
}

}  // namespace ferry::testing

#endif  // FERRY_TESTS_DATA_DATA_TEST_UTIL_H_
