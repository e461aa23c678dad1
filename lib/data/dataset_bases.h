// What the sources share, written once.
//
//   ListedDataset      a source's listing as every source holds it: its kind, class
//                      names, per-sample labels, listing issues, fingerprint and how
//                      its samples are read (the traits OpenDataset acts on). A source
//                      derives from it and adds its locations and its reads.
//   ForwardingDataset  a dataset around another (read-ahead, confined reads): every
//                      call passes through; the wrapper overrides what it changes.
#ifndef FERRY_DATA_DATASET_BASES_H_
#define FERRY_DATA_DATASET_BASES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/check.h"
#include "data/dataset.h"

namespace ferry {

class ListedDataset : public Dataset {
 public:
  struct Listing {
    std::string_view kind{};              // the registered source's name (data/source.h)
    std::vector<std::string> classes{};   // label order; empty when labels have no names
    std::vector<int32_t> labels{};        // one per sample; empty: every label is 0
    std::vector<ListingIssue> issues{};
    uint64_t fingerprint = 0;
    SampleReads reads = SampleReads::kByPath;
    bool entries_from_contents = false;  // Dataset::entries_from_contents
  };

  explicit ListedDataset(Listing listing) : listing_(std::move(listing)) {}

  int32_t Label(int64_t index) const override {
    FERRY_CHECK(index >= 0 && index < size());
    return listing_.labels.empty() ? 0 : listing_.labels[size_t(index)];
  }
  const std::vector<std::string>& classes() const final { return listing_.classes; }
  uint64_t fingerprint() const final { return listing_.fingerprint; }
  const std::vector<ListingIssue>& listing_issues() const final { return listing_.issues; }
  std::string_view kind() const final { return listing_.kind; }
  SampleReads sample_reads() const final { return listing_.reads; }
  bool entries_from_contents() const final { return listing_.entries_from_contents; }

 protected:
  // Sources that list as they build (COCO) fill it after construction, before the
  // dataset is handed out; it is never changed after that.
  Listing listing_;
};

class ForwardingDataset : public Dataset {
 public:
  explicit ForwardingDataset(std::unique_ptr<Dataset> inner) : inner_(std::move(inner)) {}

  int64_t size() const override { return inner_->size(); }
  int32_t Label(int64_t index) const override { return inner_->Label(index); }
  std::string Path(int64_t index) const override { return inner_->Path(index); }
  std::string Key(int64_t index) const override { return inner_->Key(index); }
  Status ReadSample(int64_t index, std::string* out) const override { return inner_->ReadSample(index, out); }
  const std::vector<std::string>& classes() const override { return inner_->classes(); }
  uint64_t fingerprint() const override { return inner_->fingerprint(); }
  const std::vector<ListingIssue>& listing_issues() const override { return inner_->listing_issues(); }
  std::string_view kind() const override { return inner_->kind(); }
  SampleReads sample_reads() const override { return inner_->sample_reads(); }
  bool entries_from_contents() const override { return inner_->entries_from_contents(); }
  void Prefetch(const std::vector<int64_t>& indices) const override { inner_->Prefetch(indices); }
  uint64_t SizeHint(int64_t index) const override { return inner_->SizeHint(index); }
  int64_t SampleIndex(int64_t index) const override { return inner_->SampleIndex(index); }
  int Part(int64_t index) const override { return inner_->Part(index); }
  std::vector<int64_t> part_sizes() const override { return inner_->part_sizes(); }
  bool has_annotations() const override { return inner_->has_annotations(); }
  Status ReadAnnotations(int64_t index, SampleAnnotations* out) const override {
    return inner_->ReadAnnotations(index, out);
  }

 protected:
  const Dataset& inner() const { return *inner_; }

 private:
  const std::unique_ptr<Dataset> inner_;
};

}  // namespace ferry

#endif  // FERRY_DATA_DATASET_BASES_H_
