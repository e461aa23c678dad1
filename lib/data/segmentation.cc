// Segmentation: an image folder and a mask folder paired by file stem, the layouts of
// VOC (JPEGImages/ + SegmentationClass/, with an ImageSets list of stems), ADE20K
// (images/training/ + annotations/training/) and Cityscapes (leftImg8bit/<city>/ +
// gtFine/<city>/, the stems differing by their suffixes "_leftImg8bit" and
// "_gtFine_labelIds").
//
// A sample is an image (any image extension) under `images`, at a path relative to it
// of stem + image_suffix + extension; its mask is masks/stem + mask_suffix + ".png".
// Without a list the images folder is walked (sorted, recursively); with one, its
// lines are the stems, in its order (blank lines and '#' comments skipped). An image
// without its mask is a listing issue; so is a list line whose image is missing. Each
// sample's mask is read with it (ReadAnnotations: the PNG's bytes), and decoded by the
// pipeline as class indices (a palette PNG's indices, VOC's form; or a gray one's
// values). `ignore_index` (255 by default, VOC's) fills where no source pixel lands.
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/hash.h"
#include "data/annotations.h"
#include "data/data_roots.h"
#include "data/dataset.h"
#include "data/dataset_bases.h"
#include "data/file_util.h"
#include "data/read_ahead.h"
#include "data/source.h"
#include "store/object_store.h"

namespace ferry {
namespace {

constexpr std::string_view kSegmentationKind = "segmentation";
constexpr uint64_t kMaxStemListBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxMaskBytes = uint64_t{256} << 20;

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Every image under `dir`, as paths relative to it, sorted.
Status WalkImages(const std::string& dir, const std::string& rel, std::vector<std::string>* out, int depth = 0) {
  if (depth > 16) return Status::OK();
  const std::string path = rel.empty() ? dir : dir + "/" + rel;
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return internal::ErrnoToStatus(errno, path);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    const std::string r = rel.empty() ? n : rel + "/" + n;
    struct stat st;
    if (::stat((dir + "/" + r).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) FERRY_RETURN_IF_ERROR(WalkImages(dir, r, out, depth + 1));
    else if (S_ISREG(st.st_mode) && HasImageExtension(n)) out->push_back(r);
  }
  return Status::OK();
}

class SegmentationDataset final : public ListedDataset {
 public:
  SegmentationDataset(internal::StringTable images, internal::StringTable masks, Listing listing, uint8_t ignore_index)
      : ListedDataset(std::move(listing)),
        images_(std::move(images)),
        masks_(std::move(masks)),
        ignore_index_(ignore_index) {}

  int64_t size() const override { return images_.size(); }
  std::string Path(int64_t index) const override { return std::string(images_.Get(index)); }
  Status ReadSample(int64_t index, std::string* out) const override {
    return internal::ReadWholeFileOrObject(Path(index), out);
  }
  bool has_annotations() const override { return true; }
  Status ReadAnnotations(int64_t index, SampleAnnotations* out) const override {
    *out = SampleAnnotations();
    out->image_id = index;
    out->semantic_fill = ignore_index_;
    out->semantic_path = std::string(masks_.Get(index));
    return internal::ReadWholeFileOrObject(out->semantic_path, &out->semantic_bytes, kMaxMaskBytes);
  }
  std::string MaskPath(int64_t index) const { return std::string(masks_.Get(index)); }

 private:
  const internal::StringTable images_, masks_;  // full paths
  const uint8_t ignore_index_;
};

}  // namespace

Result<std::unique_ptr<Dataset>> OpenSegmentation(const SegmentationOptions& given, const DataRoots& roots) {
  SegmentationOptions o = given;
  for (std::string* folder : {&o.images, &o.masks})
    while (store::IsObjectUrl(*folder) && !folder->empty() && folder->back() == '/') folder->pop_back();
  std::vector<std::string> rels;  // image paths relative to o.images
  std::vector<ListingIssue> issues;
  // Folders in object storage: a prefix's listing stands for the folder (its keys, sorted:
  // a flat folder lists as on disk), and a file exists when its key is listed.
  const bool remote = store::IsObjectUrl(o.images) || store::IsObjectUrl(o.masks);
  std::set<std::string> listed;  // full URLs of the listed images and masks
  auto list_prefix = [&](const std::string& folder, std::vector<std::string>* rel_images) -> Status {
    if (!store::IsObjectUrl(folder)) return Status::OK();
    FERRY_ASSIGN_OR_RETURN(store::ObjectUrl u, store::ParseObjectUrl(folder));
    if (!u.key.empty() && u.key.back() != '/') u.key += '/';
    FERRY_ASSIGN_OR_RETURN(std::vector<store::ObjectInfo> objects, store::ObjectStore::Get().List(u));
    const std::string base = u.ToString();
    for (const store::ObjectInfo& obj : objects) {
      const std::string rel = obj.key.substr(u.key.size());
      if (rel.empty() || rel.back() == '/') continue;
      listed.insert(base + rel);
      if (rel_images != nullptr && HasImageExtension(internal::Basename(rel))) rel_images->push_back(rel);
    }
    return Status::OK();
  };
  auto exists = [&](const std::string& path) {
    if (!store::IsObjectUrl(path)) return IsFile(path);
    // The folder's URL as given, then "/" and the name: as listed (the URL's canonical form).
    Result<store::ObjectUrl> u = store::ParseObjectUrl(path);
    return u.ok() && listed.count(u->ToString()) > 0;
  };
  FERRY_RETURN_IF_ERROR(list_prefix(o.masks, nullptr));
  if (o.list.empty()) {
    if (store::IsObjectUrl(o.images)) {
      FERRY_RETURN_IF_ERROR(list_prefix(o.images, &rels));
    } else {
      FERRY_RETURN_IF_ERROR(WalkImages(o.images, "", &rels));
    }
  } else {
    if (store::IsObjectUrl(o.images)) FERRY_RETURN_IF_ERROR(list_prefix(o.images, nullptr));
    std::string text;
    FERRY_RETURN_IF_ERROR(internal::ReadWholeFileOrObject(o.list, &text, kMaxStemListBytes));
    size_t pos = 0;
    int64_t line_no = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      std::string stem = text.substr(pos, end - pos);
      pos = end + 1;
      ++line_no;
      while (!stem.empty() && (stem.back() == '\r' || stem.back() == ' ' || stem.back() == '\t')) stem.pop_back();
      while (!stem.empty() && (stem.front() == ' ' || stem.front() == '\t')) stem.erase(0, 1);
      if (stem.empty() || stem[0] == '#') continue;
      std::string found;
      for (const char* ext : {".jpg", ".jpeg", ".png", ".JPG", ".JPEG", ".PNG", ".webp", ".bmp"}) {
        if (exists(o.images + "/" + stem + o.image_suffix + ext)) {
          found = stem + o.image_suffix + ext;
          break;
        }
      }
      if (found.empty()) {
        issues.push_back({o.list + ":" + std::to_string(line_no), "no image for this stem in the images folder"});
        continue;
      }
      rels.push_back(found);
    }
  }
  internal::StringTable images, masks;
  Fingerprinter fp;
  fp.Add(kSegmentationKind);
  for (const std::string& rel : rels) {
    std::string stem = rel.substr(0, rel.rfind('.'));
    if (!o.image_suffix.empty()) {
      if (stem.size() < o.image_suffix.size() ||
          stem.compare(stem.size() - o.image_suffix.size(), o.image_suffix.size(), o.image_suffix) != 0) {
        continue;  // not an image of this dataset (another suffix)
      }
      stem.resize(stem.size() - o.image_suffix.size());
    }
    const std::string mask = o.masks + "/" + stem + o.mask_suffix + ".png";
    const std::string image = o.images + "/" + rel;
    if (!exists(mask)) {
      issues.push_back({image, "no mask (" + stem + o.mask_suffix + ".png) in the masks folder"});
      continue;
    }
    FERRY_RETURN_IF_ERROR(roots.CheckAny(image, "image"));
    FERRY_RETURN_IF_ERROR(roots.CheckAny(mask, "mask"));
    images.Append(image);
    masks.Append(mask);
    fp.Add(rel);
    fp.Add(stem + o.mask_suffix);
  }
  if (images.size() == 0) return Status::NotFound(o.images + ": no image with a mask in " + o.masks);
  fp.AddU64(o.ignore_index);
  images.ShrinkToFit();
  masks.ShrinkToFit();
  // Each image is read by its path (or URL); a list's stems name them from its contents.
  ListedDataset::Listing listing{.kind = kSegmentationKind,
                                 .issues = std::move(issues),
                                 .fingerprint = fp.Finish(),
                                 .reads = SampleReads::kByPath,
                                 .entries_from_contents = !o.list.empty()};
  std::unique_ptr<Dataset> ds(
      new SegmentationDataset(std::move(images), std::move(masks), std::move(listing), o.ignore_index));
  if (!remote) return ds;
  const store::StoreOptions& so = store::ObjectStore::Get().options();
  return WithReadAhead(std::move(ds), {so.read_ahead_requests, so.read_ahead_bytes});
}

void RegisterSegmentationSource() {
  RegisterSource({
      .name = std::string(kSegmentationKind),
      .formats = {"segmentation"},
      .open = [](const SourceSpec& s, const DataRoots& roots) -> Result<std::unique_ptr<Dataset>> {
        DescriptionArgs args(s);
        SegmentationOptions o;
        o.images = args.Path("images");
        o.masks = args.Path("masks");
        o.list = args.Text("list");
        o.image_suffix = args.Text("image_suffix");
        o.mask_suffix = args.Text("mask_suffix");
        o.ignore_index = uint8_t(args.Int("ignore_index", 255, 0, 255));
        FERRY_RETURN_IF_ERROR(args.Finish());
        FERRY_RETURN_IF_ERROR(roots.CheckAny(o.images, "images folder"));  // URLs: before any request
        FERRY_RETURN_IF_ERROR(roots.CheckAny(o.masks, "masks folder"));
        if (!o.list.empty()) FERRY_RETURN_IF_ERROR(roots.CheckAny(o.list, "list"));
        return OpenSegmentation(o, roots);
      },
  });
}

}  // namespace ferry
