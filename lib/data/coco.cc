// COCO: an instances JSON (object detection and instance segmentation, the format of
// instances_train2017.json) and its image folder, as torchvision.datasets.CocoDetection
// reads them: one sample per image, in ascending image id, each with its annotations.
//
// The JSON is read as a stream (nlohmann's SAX interface): only the "images",
// "annotations" and "categories" arrays are kept, each element parsed alone and
// stored compactly (COCO train2017's 448 MB of JSON become about 0.3 GB of boxes and
// polygon points, not the several GB of a DOM). A malformed element is skipped and
// reported as a listing issue naming the file, the array index and the rule (never the
// element's text: the file may be anything the worker can read); malformed JSON fails
// the open with the byte offset.
//
// Per annotation: bbox [x, y, w, h] (to XYXY), category_id (the label, or 1..K in
// ascending category id with contiguous_labels), iscrowd, area, and segmentation as
// polygons or RLE (uncompressed counts, or pycocotools' compressed string).
// Options (the dataset spec's JSON): remove_images_without_annotations (torchvision's
// detection reference's rule for training: an image is kept when one of its boxes is
// larger than 1 x 1), skip_crowd (drop iscrowd annotations, as the reference's
// ConvertCocoPolysToMask does), contiguous_labels.
#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/hash.h"
#include "data/annotations.h"
#include "data/dataset.h"
#include "data/dataset_bases.h"
#include "data/file_util.h"
#include "data/read_ahead.h"
#include "data/data_roots.h"
#include "data/source.h"
#include "store/object_store.h"

namespace ferry {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------
// RLE

Result<std::vector<uint32_t>> DecodeCocoRleString(std::string_view s) {
  std::vector<uint32_t> counts;
  std::vector<int64_t> raw;
  size_t p = 0;
  while (p < s.size()) {
    int64_t x = 0;
    int k = 0;
    bool more = true;
    while (more) {
      if (p >= s.size()) return Status::InvalidArgument("RLE string ends inside a count");
      const int c = int(static_cast<unsigned char>(s[p])) - 48;
      if (c < 0 || c > 63) return Status::InvalidArgument("RLE string has a byte outside its alphabet");
      if (k >= 7) return Status::InvalidArgument("RLE string has a count of more than 35 bits");
      x |= int64_t(c & 0x1f) << (5 * k);
      more = (c & 0x20) != 0;
      ++p;
      ++k;
      if (!more && (c & 0x10) != 0) x |= -(int64_t{1} << (5 * k));  // sign-extend
    }
    if (raw.size() > 2) x += raw[raw.size() - 2];
    raw.push_back(x);
  }
  counts.reserve(raw.size());
  for (int64_t v : raw) {
    if (v < 0 || v > int64_t(std::numeric_limits<uint32_t>::max()))
      return Status::InvalidArgument("RLE string decodes to a negative or huge count");
    counts.push_back(uint32_t(v));
  }
  return counts;
}

Status ExpandRle(const std::vector<uint32_t>& counts, int32_t height, int32_t width, uint8_t* out) {
  if (height <= 0 || width <= 0) return Status::InvalidArgument("RLE size must be positive");
  const uint64_t total = uint64_t(height) * uint64_t(width);
  uint64_t sum = 0;
  for (uint32_t c : counts) sum += c;
  if (sum != total)
    return Status::InvalidArgument("RLE counts add up to " + std::to_string(sum) + ", not the mask's " +
                                   std::to_string(height) + " x " + std::to_string(width));
  // Column-major runs, alternating 0 and 1 from 0, into a row-major mask.
  uint64_t pos = 0;
  uint8_t v = 0;
  for (uint32_t c : counts) {
    for (uint32_t i = 0; i < c; ++i, ++pos) {
      const uint64_t x = pos / uint64_t(height), y = pos % uint64_t(height);
      out[y * uint64_t(width) + x] = v;
    }
    v ^= 1;
  }
  return Status::OK();
}

namespace {

constexpr std::string_view kCocoKind = "coco";
// An annotations file larger than this is not one (COCO train2017's is 448 MB).
constexpr uint64_t kMaxAnnotationBytes = uint64_t{8} << 30;

// ---------------------------------------------------------------------------------
// Streaming: each element of the three arrays, as a small DOM, handed to `element`.

class CocoSax final : public json::json_sax_t {
 public:
  using Element = std::function<void(int section, int64_t index, json&& value)>;
  static constexpr int kImages = 0, kAnnotations = 1, kCategories = 2;

  explicit CocoSax(Element element) : element_(std::move(element)) {}

  bool null() override { return Value(nullptr); }
  bool boolean(bool v) override { return Value(v); }
  bool number_integer(number_integer_t v) override { return Value(v); }
  bool number_unsigned(number_unsigned_t v) override { return Value(v); }
  bool number_float(number_float_t v, const string_t&) override { return Value(v); }
  bool string(string_t& v) override { return Value(std::move(v)); }
  bool binary(binary_t& v) override { return Value(json::binary(v)); }

  bool start_object(std::size_t) override { return Open(json::object()); }
  bool start_array(std::size_t) override {
    if (!building() && depth_ == 1 && section_key_ >= 0) {
      section_ = section_key_;
      index_ = 0;
      ++depth_;
      return true;
    }
    return Open(json::array());
  }
  bool end_object() override { return Close(); }
  bool end_array() override {
    if (!building() && depth_ == 2 && section_ >= 0) {
      section_ = -1;
      --depth_;
      return true;
    }
    return Close();
  }
  bool key(string_t& k) override {
    if (building()) {
      key_ = k;
    } else if (depth_ == 1) {
      section_key_ = k == "images" ? kImages : k == "annotations" ? kAnnotations : k == "categories" ? kCategories : -1;
    }
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    error_offset_ = int64_t(position);
    return false;
  }

  int64_t error_offset() const { return error_offset_; }
  bool top_is_object() const { return top_is_object_; }

 private:
  bool building() const { return !stack_.empty(); }

  // A scalar: into the element being built, or (an element that is not an object) to
  // the caller as is; outside the arrays it is skipped.
  bool Value(json v) {
    if (building()) {
      Put(std::move(v));
    } else if (depth_ == 0) {
      top_is_object_ = false;
    } else if (depth_ == 2 && section_ >= 0) {
      element_(section_, index_++, std::move(v));
    }
    return true;
  }
  void Put(json v) {
    json* top = stack_.back();
    if (top->is_object()) (*top)[key_] = std::move(v);
    else top->push_back(std::move(v));
  }
  bool Open(json v) {
    if (!building()) {
      if (depth_ == 0 && !v.is_object()) top_is_object_ = false;
      if (depth_ == 2 && section_ >= 0) {
        root_ = std::move(v);
        stack_.push_back(&root_);
        return true;
      }
      ++depth_;  // skipped: "info", "licenses", or deeper parts of other keys
      if (depth_ == 2) section_key_ = -1;
      return true;
    }
    json* top = stack_.back();
    json* child;
    if (top->is_object()) {
      child = &((*top)[key_] = std::move(v));
    } else {
      top->push_back(std::move(v));
      child = &top->back();
    }
    stack_.push_back(child);
    return true;
  }
  bool Close() {
    if (!building()) {
      --depth_;
      return true;
    }
    stack_.pop_back();
    if (stack_.empty()) element_(section_, index_++, std::move(root_));
    return true;
  }

  Element element_;
  int depth_ = 0;          // containers open outside the element being built
  int section_key_ = -1;   // the array the last top-level key names
  int section_ = -1;       // the array being read
  int64_t index_ = 0;      // the element's index in it
  json root_;
  std::vector<json*> stack_;
  std::string key_;
  int64_t error_offset_ = -1;
  bool top_is_object_ = true;
};

// ---------------------------------------------------------------------------------
// The listing

struct Image {
  int64_t id;
  std::string file_name;
};

struct Annotation {
  int64_t image_id;
  int64_t order;  // position in the file, to keep the file's order within an image
  std::array<float, 4> box;
  int64_t category;
  float area;
  uint8_t iscrowd;
  uint32_t poly_first = 0, poly_count = 0;  // into polygons_
  uint32_t rle_first = 0, rle_count = 0;    // into rle_
  int32_t rle_h = 0, rle_w = 0;
};

struct Polygon {
  uint64_t first;  // into coords_
  uint32_t n;      // coordinates (2 per point)
};

bool IsInt(const json& v) { return v.is_number_integer() || v.is_number_unsigned(); }
bool IsNum(const json& v) { return v.is_number() && std::isfinite(v.get<double>()); }

class CocoDataset final : public ListedDataset {
 public:
  struct Options {
    bool remove_images_without_annotations = false;
    bool skip_crowd = false;
    bool contiguous_labels = false;
  };

  static Result<std::unique_ptr<Dataset>> Open(const std::string& annotations, const std::string& images,
                                               const Options& options) {
    std::string text;
    FERRY_RETURN_IF_ERROR(internal::ReadWholeFileOrObject(annotations, &text, kMaxAnnotationBytes));
    auto ds = std::unique_ptr<CocoDataset>(new CocoDataset());
    ds->images_dir_ = images;
    std::vector<Image> images_list;
    std::vector<Annotation> anns;
    std::unordered_map<int64_t, size_t> image_at;
    std::vector<int64_t> categories;
    auto issue = [&](const char* section, int64_t index, const std::string& why) {
      ds->listing_.issues.push_back({annotations + ":" + section + "[" + std::to_string(index) + "]", why});
    };
    CocoSax sax([&](int section, int64_t index, json&& v) {
      if (!v.is_object()) {
        issue(section == CocoSax::kImages ? "images" : section == CocoSax::kAnnotations ? "annotations" : "categories",
              index, "not an object");
        return;
      }
      if (section == CocoSax::kImages) {
        const auto id = v.find("id");
        const auto name = v.find("file_name");
        if (id == v.end() || !IsInt(*id)) return issue("images", index, "id must be an integer");
        if (name == v.end() || !name->is_string() || name->get_ref<const std::string&>().empty())
          return issue("images", index, "file_name must be a non-empty string");
        if (!image_at.emplace(id->get<int64_t>(), images_list.size()).second)
          return issue("images", index, "a second image with the same id");
        images_list.push_back({id->get<int64_t>(), name->get<std::string>()});
      } else if (section == CocoSax::kCategories) {
        const auto id = v.find("id");
        if (id == v.end() || !IsInt(*id)) return issue("categories", index, "id must be an integer");
        categories.push_back(id->get<int64_t>());
      } else {
        ds->ParseAnnotation(v, index, &anns, issue);
      }
    });
    const bool parsed = json::sax_parse(text, &sax);
    if (!parsed || !sax.top_is_object())
      return Status::InvalidArgument(annotations + ": not a COCO annotations file: " +
                                     (sax.error_offset() >= 0
                                          ? "malformed JSON at byte " + std::to_string(sax.error_offset())
                                          : std::string("the top level is not a JSON object")));
    text = std::string();
    if (images_list.empty()) return Status::NotFound(annotations + ": the annotations list no images");

    // Labels.
    std::sort(categories.begin(), categories.end());
    categories.erase(std::unique(categories.begin(), categories.end()), categories.end());
    std::unordered_map<int64_t, int64_t> label_of;
    for (size_t i = 0; i < categories.size(); ++i) label_of[categories[i]] = int64_t(i) + 1;

    // Annotations to their images, in image id order, the file's order within one.
    std::sort(images_list.begin(), images_list.end(), [](const Image& a, const Image& b) { return a.id < b.id; });
    image_at.clear();
    for (size_t i = 0; i < images_list.size(); ++i) image_at[images_list[i].id] = i;
    std::vector<Annotation> kept;
    kept.reserve(anns.size());
    // Images a skipped crowd annotation makes usable: the reference decides which images
    // to keep before ConvertCocoPolysToMask drops the crowd (an image with only crowd
    // boxes stays, with no box).
    std::vector<uint8_t> crowd_usable(options.skip_crowd ? images_list.size() : 0, 0);
    for (Annotation& a : anns) {
      const auto at = image_at.find(a.image_id);
      if (at == image_at.end()) {
        issue("annotations", a.order, "image_id names no image");
        continue;
      }
      if (options.skip_crowd && a.iscrowd) {
        if (a.box[2] - a.box[0] > 1 && a.box[3] - a.box[1] > 1) crowd_usable[at->second] = 1;
        continue;
      }
      if (options.contiguous_labels) {
        const auto l = label_of.find(a.category);
        if (l == label_of.end()) {
          issue("annotations", a.order, "category_id names no category");
          continue;
        }
        a.category = l->second;
      }
      kept.push_back(a);
    }
    std::stable_sort(kept.begin(), kept.end(), [&](const Annotation& a, const Annotation& b) {
      return image_at[a.image_id] < image_at[b.image_id];
    });
    // Images (dropping those without a usable box, when asked), each with its range.
    Fingerprinter fp;
    fp.Add(kCocoKind);
    size_t a = 0;
    for (size_t i = 0; i < images_list.size(); ++i) {
      const size_t first = a;
      while (a < kept.size() && kept[a].image_id == images_list[i].id) ++a;
      if (options.remove_images_without_annotations) {
        bool usable = !crowd_usable.empty() && crowd_usable[i];
        for (size_t k = first; k < a && !usable; ++k)
          usable = kept[k].box[2] - kept[k].box[0] > 1 && kept[k].box[3] - kept[k].box[1] > 1;
        if (!usable) continue;
      }
      ds->names_.Append(images_list[i].file_name);
      ds->ids_.push_back(images_list[i].id);
      ds->ann_begin_.push_back(ds->anns_.size());
      fp.Add(images_list[i].file_name);
      fp.AddU64(uint64_t(images_list[i].id));
      for (size_t k = first; k < a; ++k) {
        const Annotation& an = kept[k];
        ds->anns_.push_back(an);
        for (float f : an.box) fp.AddU64(uint64_t(std::bit_cast<uint32_t>(f)));
        fp.AddU64(uint64_t(an.category));
        fp.AddU64(uint64_t(an.iscrowd) << 32 | an.poly_count << 1 | (an.rle_count > 0));
      }
    }
    ds->ann_begin_.push_back(ds->anns_.size());
    if (ds->ids_.empty()) return Status::NotFound(annotations + ": no image has a usable annotation");
    fp.AddU64(uint64_t(options.contiguous_labels) | uint64_t(options.skip_crowd) << 1 |
              uint64_t(options.remove_images_without_annotations) << 2);
    ds->listing_.fingerprint = fp.Finish();
    ds->names_.ShrinkToFit();
    ds->anns_.shrink_to_fit();
    ds->polygons_.shrink_to_fit();
    ds->coords_.shrink_to_fit();
    ds->rle_.shrink_to_fit();
    return std::unique_ptr<Dataset>(std::move(ds));
  }

  int64_t size() const override { return int64_t(ids_.size()); }
  std::string Path(int64_t index) const override { return internal::JoinPath(images_dir_, names_.Get(index)); }
  Status ReadSample(int64_t index, std::string* out) const override {
    return internal::ReadWholeFileOrObject(Path(index), out);  // images in a bucket too
  }

  bool has_annotations() const override { return true; }
  Status ReadAnnotations(int64_t index, SampleAnnotations* out) const override {
    FERRY_CHECK(index >= 0 && index < size());
    *out = SampleAnnotations();
    out->image_id = ids_[size_t(index)];
    bool any_mask = false;
    for (size_t k = ann_begin_[size_t(index)]; k < ann_begin_[size_t(index) + 1]; ++k)
      any_mask = any_mask || anns_[k].poly_count > 0 || anns_[k].rle_count > 0;
    for (size_t k = ann_begin_[size_t(index)]; k < ann_begin_[size_t(index) + 1]; ++k) {
      const Annotation& a = anns_[k];
      out->boxes.push_back(a.box);
      out->labels.push_back(a.category);
      out->iscrowd.push_back(a.iscrowd);
      out->area.push_back(a.area);
      if (!any_mask) continue;
      MaskAnnotation m;
      for (uint32_t p = a.poly_first; p < a.poly_first + a.poly_count; ++p) {
        const Polygon& poly = polygons_[p];
        m.polygons.emplace_back(coords_.begin() + int64_t(poly.first), coords_.begin() + int64_t(poly.first + poly.n));
      }
      if (a.rle_count > 0) {
        m.rle_counts.assign(rle_.begin() + a.rle_first, rle_.begin() + a.rle_first + a.rle_count);
        m.rle_height = a.rle_h, m.rle_width = a.rle_w;
      }
      out->masks.push_back(std::move(m));
    }
    return Status::OK();
  }

 private:
  // Its images are files (or objects) named in the annotations: each read by its path.
  CocoDataset()
      : ListedDataset({.kind = kCocoKind, .reads = SampleReads::kByPath, .entries_from_contents = true}) {}

  template <typename Issue>
  void ParseAnnotation(const json& v, int64_t index, std::vector<Annotation>* anns, const Issue& issue) {
    Annotation a{};
    a.order = index;
    const auto image = v.find("image_id");
    if (image == v.end() || !IsInt(*image)) return issue("annotations", index, "image_id must be an integer");
    a.image_id = image->get<int64_t>();
    const auto cat = v.find("category_id");
    if (cat == v.end() || !IsInt(*cat)) return issue("annotations", index, "category_id must be an integer");
    a.category = cat->get<int64_t>();
    const auto bbox = v.find("bbox");
    if (bbox == v.end() || !bbox->is_array() || bbox->size() != 4 || !IsNum((*bbox)[0]) || !IsNum((*bbox)[1]) ||
        !IsNum((*bbox)[2]) || !IsNum((*bbox)[3]))
      return issue("annotations", index, "bbox must be [x, y, width, height], four numbers");
    const double x = (*bbox)[0].get<double>(), y = (*bbox)[1].get<double>();
    const double w = (*bbox)[2].get<double>(), h = (*bbox)[3].get<double>();
    if (w < 0 || h < 0) return issue("annotations", index, "bbox has a negative width or height");
    a.box = {float(x), float(y), float(x + w), float(y + h)};
    const auto crowd = v.find("iscrowd");
    if (crowd != v.end()) {
      if (!IsInt(*crowd) || (crowd->get<int64_t>() != 0 && crowd->get<int64_t>() != 1))
        return issue("annotations", index, "iscrowd must be 0 or 1");
      a.iscrowd = uint8_t(crowd->get<int64_t>());
    }
    const auto area = v.find("area");
    if (area != v.end()) {
      if (!IsNum(*area)) return issue("annotations", index, "area must be a number");
      a.area = float(area->get<double>());
    } else {
      a.area = float(w * h);
    }
    const auto seg = v.find("segmentation");
    if (seg != v.end() && !seg->is_null()) {
      if (seg->is_array()) {
        const uint32_t first = uint32_t(polygons_.size());
        const size_t coords_first = coords_.size();
        auto bad = [&] {
          coords_.resize(coords_first);
          polygons_.resize(first);
          issue("annotations", index, "segmentation polygons must be lists of x, y numbers");
        };
        for (const json& poly : *seg) {
          if (!poly.is_array() || poly.size() % 2 != 0) return bad();
          const uint64_t begin = coords_.size();
          for (const json& c : poly) {
            if (!IsNum(c)) return bad();
            coords_.push_back(float(c.get<double>()));
          }
          if (poly.size() >= 6) polygons_.push_back({begin, uint32_t(poly.size())});
          else coords_.resize(begin);  // fewer than 3 points: no area (pycocotools skips them too)
        }
        a.poly_first = first;
        a.poly_count = uint32_t(polygons_.size()) - first;
      } else if (seg->is_object()) {
        const auto size = seg->find("size");
        const auto counts = seg->find("counts");
        if (size == seg->end() || !size->is_array() || size->size() != 2 || !IsInt((*size)[0]) || !IsInt((*size)[1]) ||
            (*size)[0].get<int64_t>() <= 0 || (*size)[1].get<int64_t>() <= 0 ||
            (*size)[0].get<int64_t>() > 65535 || (*size)[1].get<int64_t>() > 65535)
          return issue("annotations", index, "segmentation RLE size must be [height, width], each in [1, 65535]");
        a.rle_h = int32_t((*size)[0].get<int64_t>());
        a.rle_w = int32_t((*size)[1].get<int64_t>());
        std::vector<uint32_t> c;
        if (counts != seg->end() && counts->is_string()) {
          Result<std::vector<uint32_t>> d = DecodeCocoRleString(counts->get_ref<const std::string&>());
          if (!d.ok()) return issue("annotations", index, "segmentation RLE: " + d.status().message());
          c = std::move(*d);
        } else if (counts != seg->end() && counts->is_array()) {
          for (const json& n : *counts) {
            if (!IsInt(n) || n.get<int64_t>() < 0 || n.get<int64_t>() > int64_t(UINT32_MAX))
              return issue("annotations", index, "segmentation RLE counts must be non-negative integers");
            c.push_back(uint32_t(n.get<int64_t>()));
          }
        } else {
          return issue("annotations", index, "segmentation RLE counts must be a list or a string");
        }
        uint64_t sum = 0;
        for (uint32_t n : c) sum += n;
        if (sum != uint64_t(a.rle_h) * uint64_t(a.rle_w))
          return issue("annotations", index, "segmentation RLE counts do not add up to height x width");
        a.rle_first = uint32_t(rle_.size());
        a.rle_count = uint32_t(c.size());
        rle_.insert(rle_.end(), c.begin(), c.end());
      } else {
        return issue("annotations", index, "segmentation must be polygons or an RLE object");
      }
    }
    anns->push_back(a);
  }

  std::string images_dir_;
  internal::StringTable names_;
  std::vector<int64_t> ids_;
  std::vector<size_t> ann_begin_;  // size() + 1 offsets into anns_
  std::vector<Annotation> anns_;
  std::vector<Polygon> polygons_;
  std::vector<float> coords_;
  std::vector<uint32_t> rle_;
};

}  // namespace

Result<std::unique_ptr<Dataset>> OpenCoco(const std::string& annotations, const std::string& images,
                                          const CocoOptions& options) {
  CocoDataset::Options o;
  o.remove_images_without_annotations = options.remove_images_without_annotations;
  o.skip_crowd = options.skip_crowd;
  o.contiguous_labels = options.contiguous_labels;
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, CocoDataset::Open(annotations, images, o));
  if (!store::IsObjectUrl(images)) return ds;
  // Images in a bucket: fetched ahead of decoding, as an ImageFolder's.
  const store::StoreOptions& so = store::ObjectStore::Get().options();
  return WithReadAhead(std::move(ds), {so.read_ahead_requests, so.read_ahead_bytes});
}

void RegisterCocoSource() {
  RegisterSource({
      .name = std::string(kCocoKind),
      .formats = {"coco"},
      .open = [](const SourceSpec& s, const DataRoots& roots) -> Result<std::unique_ptr<Dataset>> {
        DescriptionArgs args(s);
        const std::string annotations = args.Path("annotations");
        const std::string images = args.Path("images");
        CocoOptions o;
        o.remove_images_without_annotations = args.Flag("remove_images_without_annotations", false);
        o.skip_crowd = args.Flag("skip_crowd", false);
        o.contiguous_labels = args.Flag("contiguous_labels", false);
        FERRY_RETURN_IF_ERROR(args.Finish());
        FERRY_RETURN_IF_ERROR(roots.CheckAny(annotations, "annotations file"));  // before any request
        FERRY_RETURN_IF_ERROR(roots.CheckAny(images, "images folder"));
        return OpenCoco(annotations, images, o);
      },
  });
}

}  // namespace ferry
