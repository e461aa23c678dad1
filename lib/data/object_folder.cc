// ImageFolder in object storage: s3://bucket/prefix/<class>/**/<image>, listed as
// torchvision.datasets.ImageFolder lists the same tree on disk (data/image_folder.cc):
// classes are the first "folders" under the prefix, sorted; within a class, folders in
// the order of their whole path and files sorted within each. A bucket has no folders,
// only keys: a folder is a key's part before a '/', and a key ending in '/' (a "folder
// marker" the consoles make) is not a file. Same rules, same order, same labels, and the
// same fingerprint as the tree on disk (kind, relative paths and labels), so a job reads
// the same samples wherever the tree lies.
//
// Reads: each sample one GET of its object (its size is known from the listing, so an
// object over the sample limit is refused before it is fetched).
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/hash.h"
#include "data/data_roots.h"
#include "data/dataset.h"
#include "data/dataset_bases.h"
#include "data/file_util.h"
#include "data/object_dataset.h"
#include "data/read_ahead.h"
#include "data/source.h"
#include "store/object_store.h"

namespace ferry {
namespace {

constexpr std::string_view kObjectFolderKind = "image_folder";

class ObjectFolderDataset final : public ListedDataset {
 public:
  ObjectFolderDataset(store::ObjectUrl root, internal::StringTable rel, std::vector<uint64_t> sizes, Listing listing)
      : ListedDataset(std::move(listing)), root_(std::move(root)), rel_(std::move(rel)), sizes_(std::move(sizes)) {}

  int64_t size() const override { return rel_.size(); }
  std::string Path(int64_t index) const override { return UrlOf(index).ToString(); }
  Status ReadSample(int64_t index, std::string* out) const override {
    FERRY_CHECK(index >= 0 && index < size());
    const uint64_t n = sizes_[size_t(index)];
    if (n > internal::kMaxSampleBytes)
      return Status::InvalidArgument(Path(index) + ": " + std::to_string(n) + " bytes, over the 1 GiB a sample may have");
    return store::ObjectStore::Get().Read(UrlOf(index), 0, n, out, internal::kMaxSampleBytes);
  }
  uint64_t SizeHint(int64_t index) const override { return sizes_[size_t(index)]; }
 private:
  store::ObjectUrl UrlOf(int64_t index) const {
    store::ObjectUrl u = root_;
    u.key += rel_.Get(index);
    return u;
  }

  const store::ObjectUrl root_;  // its key ends in '/' (or is empty: the bucket)
  const internal::StringTable rel_;  // relative to root_: "cat/001.jpg"
  const std::vector<uint64_t> sizes_;
};

}  // namespace

Result<std::unique_ptr<Dataset>> OpenObjectImageFolder(const store::ObjectUrl& url) {
  store::ObjectUrl root = url;
  if (!root.key.empty() && root.key.back() != '/') root.key += '/';
  FERRY_ASSIGN_OR_RETURN(std::vector<store::ObjectInfo> objects, store::ObjectStore::Get().List(root));
  return ObjectImageFolderOf(root, objects);
}

Result<std::unique_ptr<Dataset>> ObjectImageFolderOf(const store::ObjectUrl& root,
                                                     const std::vector<store::ObjectInfo>& objects) {
  // class -> folder (relative path) -> files (name, size)
  std::map<std::string, std::map<std::string, std::vector<std::pair<std::string, uint64_t>>>> tree;
  std::vector<ListingIssue> issues;
  for (const store::ObjectInfo& o : objects) {
    const std::string_view rel = std::string_view(o.key).substr(root.key.size());
    const size_t first = rel.find('/');
    if (first == std::string_view::npos) continue;  // a file directly under the root: not a sample
    const std::string cls(rel.substr(0, first));
    auto& folders = tree[cls];  // a class exists once a key is under it, folder markers included
    if (rel.back() == '/') continue;  // a folder marker
    const size_t last = rel.rfind('/');
    const std::string name(rel.substr(last + 1));
    // A key whose folder has an image extension ("x.jpg/y"): the folder is reported, as
    // on disk, and walked.
    if (HasImageExtension(name)) folders[std::string(rel.substr(0, last))].emplace_back(name, o.size);
  }
  if (tree.empty())
    return Status::NotFound(root.ToString() + ": no class folders (ImageFolder expects prefix/<class>/<image>)");
  std::vector<std::string> classes;
  internal::StringTable paths;
  std::vector<int32_t> labels;
  std::vector<uint64_t> sizes;
  for (auto& [cls, folders] : tree) {
    const int32_t label = int32_t(classes.size());
    classes.push_back(cls);
    int64_t n = 0;
    // std::map orders folders by their whole relative path: sorted(os.walk(...)).
    for (auto& [folder, files] : folders) {
      std::sort(files.begin(), files.end());
      for (const auto& [name, size] : files) {
        paths.Append(folder + "/" + name);
        labels.push_back(label);
        sizes.push_back(size);
        ++n;
      }
    }
    if (n == 0)
      issues.push_back({root.ToString() + cls, "class folder has no image files (its label is kept)"});
  }
  for (auto& [cls, folders] : tree) {
    for (auto& [folder, files] : folders) {
      // Folders named like images, on the way from the class to this folder.
      size_t from = cls.size();
      while (from < folder.size()) {
        const size_t next = folder.find('/', from + 1);
        const std::string part = folder.substr(0, next);
        if (HasImageExtension(internal::Basename(part)) &&
            std::none_of(issues.begin(), issues.end(),
                         [&](const ListingIssue& i) { return i.path == root.ToString() + part; }))
          issues.push_back({root.ToString() + part, "is a directory"});
        if (next == std::string::npos) break;
        from = next;
      }
    }
  }
  if (paths.size() == 0)
    return Status::NotFound(root.ToString() +
                            ": no image files in any class folder (extensions: .jpg .jpeg .png .ppm .bmp .pgm .tif "
                            ".tiff .webp)");
  Fingerprinter fp;
  fp.Add(kObjectFolderKind);
  for (int64_t i = 0; i < paths.size(); ++i) {
    fp.Add(paths.Get(i));
    fp.AddU64(uint64_t(labels[size_t(i)]));
  }
  paths.ShrinkToFit();
  // Every key is under the root the open checked.
  ListedDataset::Listing listing{.kind = kObjectFolderKind,
                                 .classes = std::move(classes),
                                 .labels = std::move(labels),
                                 .issues = std::move(issues),
                                 .fingerprint = fp.Finish(),
                                 .reads = SampleReads::kChecked};
  return std::unique_ptr<Dataset>(new ObjectFolderDataset(root, std::move(paths), std::move(sizes), std::move(listing)));
}

Result<std::unique_ptr<Dataset>> OpenObjectDataset(const std::string& spec, const DataRoots& roots) {
  // Shards: a brace pattern (s3://b/train/shard-{000000..000127}.tar), one .tar, or a
  // comma-separated list of them, each URL checked against the roots before any request.
  std::vector<std::string> shards;
  if (spec.find('{') != std::string::npos || spec.find(',') != std::string::npos ||
      internal::EndsWithIgnoreCase(spec, ".tar")) {
    FERRY_ASSIGN_OR_RETURN(shards, internal::ShardsOfPattern(spec, roots));
    return OpenTarShards(shards);
  }
  FERRY_RETURN_IF_ERROR(roots.CheckUrl(spec, "dataset"));
  FERRY_ASSIGN_OR_RETURN(store::ObjectUrl url, store::ParseObjectUrl(spec));
  // A list object: its entries are keys beside it (or absolute URLs, or paths), each
  // checked by OpenDataset before the job is taken.
  if (internal::EndsWithIgnoreCase(url.key, ".tsv") || internal::EndsWithIgnoreCase(url.key, ".txt"))
    return OpenFileList(spec);
  if (!url.is_s3())
    return Status::InvalidArgument(spec + ": an http(s) server has no listing: name its shards (a brace pattern "
                                          "such as https://host/shard-{000..127}.tar)");
  // A prefix holding .tar objects and nothing deeper: its shards, in key order (as a
  // folder of shards on disk). Anything else: an ImageFolder layout.
  store::ObjectUrl prefix = url;
  if (!prefix.key.empty() && prefix.key.back() != '/') prefix.key += '/';
  FERRY_ASSIGN_OR_RETURN(std::vector<store::ObjectInfo> objects, store::ObjectStore::Get().List(prefix));
  bool all_tars = !objects.empty();
  for (const store::ObjectInfo& o : objects) {
    const std::string_view rel = std::string_view(o.key).substr(prefix.key.size());
    if (rel.find('/') != std::string_view::npos || !internal::EndsWithIgnoreCase(rel, ".tar")) all_tars = false;
  }
  if (all_tars) {
    for (const store::ObjectInfo& o : objects) {
      store::ObjectUrl u = prefix;
      u.key = o.key;
      shards.push_back(u.ToString());
    }
    return OpenTarShards(shards);
  }
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, ObjectImageFolderOf(prefix, objects));  // listed once
  const store::StoreOptions& o = store::ObjectStore::Get().options();
  return WithReadAhead(std::move(ds), {o.read_ahead_requests, o.read_ahead_bytes});
}

void RegisterObjectSource() {
  RegisterSource({
      .name = "objects",
      .summary = "objects in S3-compatible storage or on an HTTP(S) server",
      .schemes = {"s3", "https", "http"},
      .open = [](const SourceSpec& s, const DataRoots& roots) { return OpenObjectDataset(s.text, roots); },
  });
}

}  // namespace ferry
