#include "pipeline/targets_batch.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "image/format_decoders.h"

namespace ferry {

namespace {
// A mask has its image's pixels, checked against the job's limit when the image was
// decoded; this bounds a mask's own header (OpenCV's default limit, which applied here).
constexpr int64_t kMaxMaskPixels = int64_t(1) << 30;
}  // namespace

Result<cv::Mat> DecodeClassMask(const std::string& png) {
  static const unsigned char kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (png.size() < 33 || std::memcmp(png.data(), kSig, 8) != 0 || png.compare(12, 4, "IHDR") != 0)
    return Status::InvalidArgument("the mask is not a PNG");
  const int depth = static_cast<unsigned char>(png[24]), color = static_cast<unsigned char>(png[25]);
  if (depth != 8 && !(color == 3 && depth < 8))
    return Status::InvalidArgument("the mask is a " + std::to_string(depth) + "-bit PNG: class masks are 8-bit");
  if (color == 0) {  // gray: the values are the classes
    Result<cv::Mat> m = DecodePng(png, /*gray=*/true, kMaxMaskPixels);
    if (!m.ok()) return Status::DataLoss("the mask PNG does not decode: " + m.status().message());
    return m;
  }
  if (color != 3) return Status::InvalidArgument("the mask is an RGB PNG: class masks are palette or gray PNGs");
  // Palette (VOC's form): the decoder expands it to colours, so each colour is mapped back
  // to its index through the PLTE chunk.
  std::unordered_map<uint32_t, uint8_t> index;
  size_t p = 8;
  bool found = false;
  while (p + 12 <= png.size()) {
    const uint32_t len = uint32_t(static_cast<unsigned char>(png[p])) << 24 |
                         uint32_t(static_cast<unsigned char>(png[p + 1])) << 16 |
                         uint32_t(static_cast<unsigned char>(png[p + 2])) << 8 | static_cast<unsigned char>(png[p + 3]);
    if (len > png.size() - p - 12) break;
    if (png.compare(p + 4, 4, "PLTE") == 0) {
      for (uint32_t k = 0; k + 2 < len && k / 3 < 256; k += 3) {
        const auto* c = reinterpret_cast<const unsigned char*>(png.data() + p + 8 + k);
        const uint32_t rgb = uint32_t(c[0]) << 16 | uint32_t(c[1]) << 8 | c[2];
        index.emplace(rgb, uint8_t(k / 3));  // the first index of a repeated colour
      }
      found = true;
      break;
    }
    p += 12 + len;
  }
  if (!found) return Status::InvalidArgument("the palette mask PNG has no PLTE chunk");
  Result<cv::Mat> decoded = DecodePng(png, /*gray=*/false, kMaxMaskPixels);
  if (!decoded.ok()) return Status::DataLoss("the mask PNG does not decode: " + decoded.status().message());
  const cv::Mat& rgb_mask = *decoded;
  cv::Mat out(rgb_mask.rows, rgb_mask.cols, CV_8UC1);
  for (int y = 0; y < rgb_mask.rows; ++y) {
    const cv::Vec3b* in = rgb_mask.ptr<cv::Vec3b>(y);
    uint8_t* o = out.ptr<uint8_t>(y);
    uint32_t last = 0xffffffffu;
    uint8_t last_index = 0;
    for (int x = 0; x < rgb_mask.cols; ++x) {
      const uint32_t rgb = uint32_t(in[x][0]) << 16 | uint32_t(in[x][1]) << 8 | in[x][2];
      if (rgb != last) {
        const auto it = index.find(rgb);
        if (it == index.end()) return Status::DataLoss("the mask PNG has a colour outside its palette");
        last = rgb, last_index = it->second;
      }
      o[x] = last_index;
    }
  }
  return out;
}

Status TargetsFromAnnotations(const SampleAnnotations& a, bool masks, SampleTargets* t) {
  *t = SampleTargets();
  t->image_id = a.image_id;
  t->text = a.text;
  t->meta = a.meta;
  t->semantic_fill = a.semantic_fill;
  if (masks && !a.semantic_bytes.empty()) {
    Result<cv::Mat> m = DecodeClassMask(a.semantic_bytes);
    if (!m.ok()) return m.status().WithContext("mask " + a.semantic_path);
    t->semantic = *m;
  }
  t->boxes = a.boxes;
  t->labels = a.labels;
  t->iscrowd = a.iscrowd;
  t->area = a.area;
  if (!masks || a.masks.empty()) return Status::OK();
  t->masks.resize(a.masks.size());
  for (size_t i = 0; i < a.masks.size(); ++i) {
    const MaskAnnotation& m = a.masks[i];
    InstanceMask& out = t->masks[i];
    for (const std::vector<float>& poly : m.polygons) {
      std::vector<cv::Point2f> pts;
      pts.reserve(poly.size() / 2);
      for (size_t k = 0; k + 1 < poly.size(); k += 2) pts.emplace_back(poly[k], poly[k + 1]);
      out.polygons.push_back(std::move(pts));
    }
    if (!m.rle_counts.empty()) {
      out.raster.create(m.rle_height, m.rle_width, CV_8UC1);
      const Status s = ExpandRle(m.rle_counts, m.rle_height, m.rle_width, out.raster.data);
      if (!s.ok()) return Status::InvalidArgument("annotation " + std::to_string(i) + ": " + s.message());
    }
  }
  return Status::OK();
}

Status CheckTargetSource(const std::vector<std::string>& targets, const Dataset& dataset) {
  if (dataset.has_annotations() || std::all_of(targets.begin(), targets.end(), [](const std::string& t) {
        return t == "key";
      }))
    return Status::OK();
  return Status::InvalidArgument("the job asks for targets (" + targets.front() + (targets.size() > 1 ? ", ..." : "") +
                                 ") but its dataset (" + std::string(dataset.kind()) +
                                 ") has no annotations: targets come from a COCO file, segmentation folders, or WebDataset shards with "
                                 "txt, json or mask members");
}

namespace {

using Buffers = std::vector<std::vector<uint64_t>>;

// A tensor of `bytes` bytes in a new buffer (rounded up to words, zeroed).
TensorView NewTensor(Buffers* buffers, DType dtype, std::initializer_list<int64_t> shape) {
  TensorView v;
  v.dtype = dtype;
  v.rank = int(shape.size());
  int i = 0;
  for (int64_t d : shape) v.shape[size_t(i++)] = d;
  buffers->emplace_back((v.num_bytes() + 7) / 8, 0);
  v.data = buffers->back().data();
  return v;
}

}  // namespace

PackedFields PackFields(const std::vector<std::string>& names, const std::vector<SampleTargets>& rows,
                        int64_t num_rows, int out_h, int out_w, int32_t token_length, int32_t token_pad) {
  auto buffers = std::make_shared<Buffers>();
  buffers->reserve(names.size() * 2);
  PackedFields out;
  static const SampleTargets kNone;
  auto row = [&](int64_t r) -> const SampleTargets& { return size_t(r) < rows.size() ? rows[size_t(r)] : kNone; };
  // Offsets of the per-box fields: one range per row.
  int64_t total = 0;
  auto offsets = [&]() {
    TensorView o = NewTensor(buffers.get(), DType::kInt64, {num_rows + 1});
    int64_t* p = o.as<int64_t>();
    p[0] = 0;
    for (int64_t r = 0; r < num_rows; ++r) p[r + 1] = p[r] + int64_t(row(r).boxes.size());
    total = p[num_rows];
    return o;
  };
  const size_t plane = size_t(out_h) * size_t(out_w);
  for (const std::string& name : names) {
    BatchField f;
    f.name = name;
    if (name == "image_id") {
      f.values = NewTensor(buffers.get(), DType::kInt64, {num_rows});
      for (int64_t r = 0; r < num_rows; ++r) f.values.as<int64_t>()[r] = size_t(r) < rows.size() ? row(r).image_id : -1;
    } else if (name == "text" || name == "meta" || name == "key") {
      // Bytes, ragged: row r's are values[offsets[r] .. offsets[r + 1]).
      auto bytes = [&](int64_t r) -> const std::string& {
        return name == "text" ? row(r).text : name == "meta" ? row(r).meta : row(r).key;
      };
      f.offsets = NewTensor(buffers.get(), DType::kInt64, {num_rows + 1});
      int64_t* o = f.offsets.as<int64_t>();
      o[0] = 0;
      for (int64_t r = 0; r < num_rows; ++r) o[r + 1] = o[r] + int64_t(bytes(r).size());
      f.values = NewTensor(buffers.get(), DType::kUint8, {o[num_rows]});
      for (int64_t r = 0; r < num_rows; ++r) {
        const std::string& s = bytes(r);
        if (!s.empty()) std::memcpy(f.values.as<uint8_t>() + o[r], s.data(), s.size());
      }
    } else if (name == "tokens") {
      const int64_t len = std::max<int32_t>(token_length, 1);
      f.values = NewTensor(buffers.get(), DType::kInt32, {num_rows, len});
      BatchField lengths;
      lengths.name = "tokens_length";
      lengths.values = NewTensor(buffers.get(), DType::kInt32, {num_rows});
      for (int64_t r = 0; r < num_rows; ++r) {
        int32_t* ids = f.values.as<int32_t>() + r * len;
        const std::vector<int32_t>& t = row(r).tokens;
        const int64_t n = std::min<int64_t>(int64_t(t.size()), len);
        if (n > 0) std::memcpy(ids, t.data(), size_t(n) * sizeof(int32_t));
        std::fill(ids + n, ids + len, token_pad);
        lengths.values.as<int32_t>()[r] = int32_t(n);
      }
      out.fields.push_back(std::move(f));
      out.fields.push_back(std::move(lengths));
      continue;
    } else if (name == "semantic") {
      f.values = NewTensor(buffers.get(), DType::kUint8, {num_rows, out_h, out_w});
      for (int64_t r = 0; r < num_rows; ++r) {
        const cv::Mat& s = row(r).semantic;
        if (s.rows == out_h && s.cols == out_w && s.type() == CV_8UC1) {
          for (int y = 0; y < out_h; ++y)
            std::memcpy(f.values.as<uint8_t>() + size_t(r) * plane + size_t(y) * size_t(out_w), s.ptr(y), size_t(out_w));
        }
      }
    } else {
      f.offsets = offsets();
      const int64_t* o = f.offsets.as<int64_t>();
      if (name == "boxes") {
        f.values = NewTensor(buffers.get(), DType::kFloat32, {total, 4});
        for (int64_t r = 0; r < num_rows; ++r)
          if (!row(r).boxes.empty())
            std::memcpy(f.values.as<float>() + o[r] * 4, row(r).boxes.data(), row(r).boxes.size() * 4 * sizeof(float));
      } else if (name == "labels") {
        f.values = NewTensor(buffers.get(), DType::kInt64, {total});
        for (int64_t r = 0; r < num_rows; ++r)
          if (!row(r).labels.empty())
            std::memcpy(f.values.as<int64_t>() + o[r], row(r).labels.data(), row(r).labels.size() * sizeof(int64_t));
      } else if (name == "iscrowd") {
        f.values = NewTensor(buffers.get(), DType::kUint8, {total});
        for (int64_t r = 0; r < num_rows; ++r)
          if (row(r).iscrowd.size() == row(r).boxes.size() && !row(r).iscrowd.empty())
            std::memcpy(f.values.as<uint8_t>() + o[r], row(r).iscrowd.data(), row(r).iscrowd.size());
      } else if (name == "area") {
        f.values = NewTensor(buffers.get(), DType::kFloat32, {total});
        for (int64_t r = 0; r < num_rows; ++r)
          if (row(r).area.size() == row(r).boxes.size() && !row(r).area.empty())
            std::memcpy(f.values.as<float>() + o[r], row(r).area.data(), row(r).area.size() * sizeof(float));
      } else if (name == "masks") {
        f.values = NewTensor(buffers.get(), DType::kUint8, {total, out_h, out_w});
        for (int64_t r = 0; r < num_rows; ++r) {
          const cv::Mat& m = row(r).instance_masks;
          const int64_t n = o[r + 1] - o[r];
          if (n == 0 || m.cols != out_w || int64_t(m.rows) != n * out_h || !m.isContinuous()) continue;
          std::memcpy(f.values.as<uint8_t>() + size_t(o[r]) * plane, m.data, size_t(n) * plane);
        }
      }
    }
    out.fields.push_back(std::move(f));
  }
  out.owner = std::move(buffers);
  return out;
}

}  // namespace ferry
