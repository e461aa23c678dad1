#include "data/mixture.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/hash.h"
#include "core/philox.h"

namespace ferry {
namespace {

// Random-stream purposes (the 4th Philox counter word): apart from the ops' (< 0x40),
// the epoch permutation's (1) and user code's (0x55).
constexpr uint32_t kPurposeSourceOrder = 0x4d;  // a source's pass: key (seed), epoch word = source, index = pass
constexpr uint32_t kPurposeInterleave = 0x4e;   // an epoch's interleaving: (seed, epoch)

struct Layout {
  std::vector<int64_t> sizes, offsets;
  int64_t total = 0;
  uint64_t passes_kept = 1;  // M: draw ids keep pass mod M
};

Layout LayoutOf(const std::vector<int64_t>& sizes) {
  Layout l;
  l.sizes = sizes;
  for (int64_t s : sizes) {
    l.offsets.push_back(l.total);
    l.total += s;
  }
  if (l.total > 0) l.passes_kept = std::max<uint64_t>(1, (uint64_t(1) << 62) / uint64_t(l.total));
  return l;
}

Layout LayoutOf(const JobSpec& job) {
  std::vector<int64_t> sizes;
  for (const MixtureSource& m : job.mixture) sizes.push_back(m.num_samples);
  return LayoutOf(sizes);
}

// Pass `pass` of source `k`'s `n` samples: a permutation drawn from (seed, k, pass).
std::vector<int64_t> PassOrder(int64_t n, uint64_t seed, int k, uint64_t pass, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle || n < 2) return order;
  SampleRng rng(seed, uint64_t(k), pass, kPurposeSourceOrder);
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(rng.Below(uint64_t(i) + 1))]);
  return order;
}

// Each position's source.
std::vector<uint16_t> Interleave(const std::vector<int64_t>& counts, int64_t n, uint64_t seed, uint64_t epoch,
                                 bool shuffle) {
  std::vector<uint16_t> who;
  who.reserve(size_t(n));
  if (shuffle) {
    for (size_t k = 0; k < counts.size(); ++k) who.insert(who.end(), size_t(counts[k]), uint16_t(k));
    SampleRng rng(seed, epoch, 0, kPurposeInterleave);
    for (int64_t i = n - 1; i > 0; --i) std::swap(who[size_t(i)], who[size_t(rng.Below(uint64_t(i) + 1))]);
    return who;
  }
  // Source k's c-th draw at time (c + 1/2) / count: each source evenly spaced, in time
  // order (ties to the earlier source). Times compared exactly: (2c + 1) * count_j
  // against (2c_j + 1) * count.
  struct Next {
    int64_t c, count;
    uint16_t k;
  };
  auto later = [](const Next& a, const Next& b) {
    const __int128 x = (__int128)(2 * a.c + 1) * b.count, y = (__int128)(2 * b.c + 1) * a.count;
    return x != y ? x > y : a.k > b.k;
  };
  std::vector<Next> heap;
  for (size_t k = 0; k < counts.size(); ++k)
    if (counts[k] > 0) heap.push_back({0, counts[k], uint16_t(k)});
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    Next& x = heap.back();
    who.push_back(x.k);
    if (++x.c < x.count) std::push_heap(heap.begin(), heap.end(), later);
    else heap.pop_back();
  }
  return who;
}

class MixtureDataset : public Dataset {
 private:
  // (source, index within it) of a draw id.
  std::pair<int, int64_t> Locate(int64_t id) const {
    const int64_t s = id % layout_.total;
    const size_t k = size_t(std::upper_bound(layout_.offsets.begin(), layout_.offsets.end(), s) -
                            layout_.offsets.begin()) - 1;
    return {int(k), s - layout_.offsets[k]};
  }
  template <typename F>
  auto At(int64_t id, F f) const {
    const auto [k, i] = Locate(id);
    return f(*parts_[size_t(k)], i);
  }

 public:
  explicit MixtureDataset(std::vector<std::shared_ptr<const Dataset>> parts) : parts_(std::move(parts)) {
    std::vector<int64_t> sizes;
    for (const auto& p : parts_) sizes.push_back(p->size());
    layout_ = LayoutOf(sizes);
    Fingerprinter f;
    f.Add("mixture");
    bool same_classes = true;
    for (const auto& p : parts_) {
      f.AddU64(p->fingerprint());
      f.AddU64(uint64_t(p->size()));
      same_classes = same_classes && p->classes() == parts_[0]->classes();
      for (const ListingIssue& i : p->listing_issues()) issues_.push_back(i);
      any_by_path_ = any_by_path_ || p->sample_reads() == SampleReads::kByPath;
      from_contents_ = from_contents_ || p->entries_from_contents();
      annotated_ = annotated_ && p->has_annotations();
    }
    fingerprint_ = f.Finish();
    if (same_classes && !parts_.empty()) classes_ = parts_[0]->classes();
  }

  int64_t size() const override { return layout_.total; }
  int32_t Label(int64_t id) const override { return At(id, [](const Dataset& d, int64_t i) { return d.Label(i); }); }
  std::string Path(int64_t id) const override {
    return At(id, [](const Dataset& d, int64_t i) { return d.Path(i); });
  }
  std::string Key(int64_t id) const override { return At(id, [](const Dataset& d, int64_t i) { return d.Key(i); }); }
  Status ReadSample(int64_t id, std::string* out) const override {
    return At(id, [out](const Dataset& d, int64_t i) { return d.ReadSample(i, out); });
  }
  const std::vector<std::string>& classes() const override { return classes_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  const std::vector<ListingIssue>& listing_issues() const override { return issues_; }
  std::string_view kind() const override { return "mixture"; }
  // Bytes are read by the sources: a by-path read if any source reads so (a confined
  // read re-checks it; the others have nothing more to check).
  SampleReads sample_reads() const override { return any_by_path_ ? SampleReads::kByPath : SampleReads::kChecked; }
  bool entries_from_contents() const override { return from_contents_; }
  void Prefetch(const std::vector<int64_t>& ids) const override {
    std::vector<std::vector<int64_t>> per(parts_.size());
    for (int64_t id : ids) {
      const auto [k, i] = Locate(id);
      per[size_t(k)].push_back(i);
    }
    for (size_t k = 0; k < parts_.size(); ++k)
      if (!per[k].empty()) parts_[k]->Prefetch(per[k]);
  }
  uint64_t SizeHint(int64_t id) const override {
    return At(id, [](const Dataset& d, int64_t i) { return d.SizeHint(i); });
  }
  bool has_annotations() const override { return annotated_ && !parts_.empty(); }
  Status ReadAnnotations(int64_t id, SampleAnnotations* out) const override {
    return At(id, [out](const Dataset& d, int64_t i) { return d.ReadAnnotations(i, out); });
  }
  int64_t SampleIndex(int64_t id) const override { return id < 0 ? id : id % layout_.total; }
  int Part(int64_t id) const override { return Locate(id).first; }
  std::vector<int64_t> part_sizes() const override { return layout_.sizes; }


 private:
  const std::vector<std::shared_ptr<const Dataset>> parts_;
  Layout layout_;
  uint64_t fingerprint_ = 0;
  std::vector<std::string> classes_;
  std::vector<ListingIssue> issues_;
  bool any_by_path_ = false, from_contents_ = false, annotated_ = true;
};

}  // namespace

std::vector<int64_t> MixtureCounts(const JobSpec& job) {
  const int64_t n = job.mixture_epoch;
  double sum = 0;
  for (const MixtureSource& m : job.mixture) sum += m.weight;
  std::vector<int64_t> counts;
  std::vector<std::pair<double, size_t>> rest;  // (fraction left, source)
  int64_t given = 0;
  for (size_t k = 0; k < job.mixture.size(); ++k) {
    const double exact = double(n) * (job.mixture[k].weight / sum);
    const int64_t c = std::min<int64_t>(n, int64_t(std::floor(exact)));
    counts.push_back(c);
    given += c;
    rest.emplace_back(exact - double(c), k);
  }
  // Largest remainders first; equal ones to the earlier source.
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < n; i = (i + 1) % rest.size(), ++given) ++counts[rest[i].second];
  for (size_t k = 0; given > n && k < counts.size(); ++k) {  // rounding never gives too many; be sure
    const int64_t cut = std::min(counts[k], given - n);
    counts[k] -= cut;
    given -= cut;
  }
  return counts;
}

std::vector<int64_t> MixtureOrder(const JobSpec& job, uint64_t epoch) {
  const Layout layout = LayoutOf(job);
  const std::vector<int64_t> counts = MixtureCounts(job);
  const std::vector<uint16_t> who = Interleave(counts, job.mixture_epoch, job.seed, epoch, job.shuffle);
  std::vector<int64_t> order(who.size());
  const size_t sources = job.mixture.size();
  std::vector<uint64_t> next(sources);  // each source's next draw t
  for (size_t k = 0; k < sources; ++k) next[k] = epoch * uint64_t(counts[k]);
  std::vector<uint64_t> pass_of(sources, ~uint64_t{0});
  std::vector<std::vector<int64_t>> pass(sources);  // each source's current pass order
  for (size_t p = 0; p < who.size(); ++p) {
    const size_t k = who[p];
    const uint64_t size = uint64_t(layout.sizes[k]);
    FERRY_CHECK(size > 0);
    const uint64_t t = next[k]++;
    const uint64_t ps = t / size;
    if (pass_of[k] != ps) {
      pass[k] = PassOrder(int64_t(size), job.seed, int(k), ps, job.shuffle);
      pass_of[k] = ps;
    }
    order[p] = layout.offsets[k] + pass[k][size_t(t % size)] + layout.total * int64_t(ps % layout.passes_kept);
  }
  return order;
}

MixtureDraw DecodeDraw(const JobSpec& job, int64_t draw_id) {
  const Layout layout = LayoutOf(job);
  const int64_t s = draw_id % layout.total;
  const size_t k =
      size_t(std::upper_bound(layout.offsets.begin(), layout.offsets.end(), s) - layout.offsets.begin()) - 1;
  return {int(k), s - layout.offsets[k]};
}

std::unique_ptr<Dataset> MakeMixtureDataset(std::vector<std::shared_ptr<const Dataset>> parts) {
  return std::make_unique<MixtureDataset>(std::move(parts));
}

}  // namespace ferry
