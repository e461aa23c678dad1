#include "pipeline/targets_batch.h"

#include <cstring>

namespace ferry {

Status TargetsFromAnnotations(const SampleAnnotations& a, bool masks, SampleTargets* t) {
  *t = SampleTargets();
  t->image_id = a.image_id;
  t->text = a.text;
  t->meta = a.meta;
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
  if (targets.empty() || dataset.has_annotations()) return Status::OK();
  return Status::InvalidArgument("the job asks for targets (" + targets.front() + (targets.size() > 1 ? ", ..." : "") +
                                 ") but its dataset (" + std::string(dataset.kind()) +
                                 ") has no annotations: targets come from a COCO source");
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
                        int64_t num_rows, int out_h, int out_w) {
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
    } else if (name == "text" || name == "meta") {
      // Bytes, ragged: row r's are values[offsets[r] .. offsets[r + 1]).
      f.offsets = NewTensor(buffers.get(), DType::kInt64, {num_rows + 1});
      int64_t* o = f.offsets.as<int64_t>();
      o[0] = 0;
      for (int64_t r = 0; r < num_rows; ++r)
        o[r + 1] = o[r] + int64_t((name == "text" ? row(r).text : row(r).meta).size());
      f.values = NewTensor(buffers.get(), DType::kUint8, {o[num_rows]});
      for (int64_t r = 0; r < num_rows; ++r) {
        const std::string& s = name == "text" ? row(r).text : row(r).meta;
        if (!s.empty()) std::memcpy(f.values.as<uint8_t>() + o[r], s.data(), s.size());
      }
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
