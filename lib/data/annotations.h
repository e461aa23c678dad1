// Annotations: what a detection, segmentation or image-text source says about one
// sample besides its image bytes, as the source stores it (no image library here):
// boxes XYXY in the image's points (targets.h's convention: the image spans [0, W] x
// [0, H]), a class per box, COCO's iscrowd and area, each box's mask as polygons or
// run-length encoded, a semantic mask file, a caption, the source's JSON metadata.
// lib/ops/targets.h turns them into pixels-aware targets once the image is decoded.
#ifndef FERRY_DATA_ANNOTATIONS_H_
#define FERRY_DATA_ANNOTATIONS_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/status.h"

namespace ferry {

// One instance's mask as COCO stores it: polygons (each a flat x0, y0, x1, y1, ...
// list in image points), or a run-length encoding of an h x w mask in column-major
// order, runs alternating 0s and 1s and starting with 0s (COCO's "counts").
struct MaskAnnotation {
  std::vector<std::vector<float>> polygons;
  std::vector<uint32_t> rle_counts;
  int32_t rle_height = 0, rle_width = 0;
  bool empty() const { return polygons.empty() && rle_counts.empty(); }
};

struct SampleAnnotations {
  int64_t image_id = -1;  // the source's id for the image (COCO's), or -1
  std::vector<std::array<float, 4>> boxes;
  std::vector<int64_t> labels;
  std::vector<uint8_t> iscrowd;
  std::vector<float> area;
  std::vector<MaskAnnotation> masks;  // empty, or one per box (an empty one: no mask)
  std::string semantic_path;          // the sample's mask file (segmentation sources), or ""
  std::string semantic_bytes;         // its bytes, read with the sample: a PNG of class indices
  uint8_t semantic_fill = 0;          // the class where no source pixel lands (VOC: 255, "ignore")
  std::string text;                   // a caption
  std::string meta;                   // the source's JSON for the sample, or ""
};

// COCO's compressed RLE string (pycocotools' rleFrString: 6-bit groups, LEB128-like,
// each count after the second a difference from the one two before) -> counts.
// InvalidArgument when it does not decode or a count is negative or huge.
Result<std::vector<uint32_t>> DecodeCocoRleString(std::string_view s);

// Expands counts into an h x w row-major 0/1 mask (`out`, h * w bytes). The counts
// must add up to h * w exactly (InvalidArgument otherwise: a truncated or padded RLE).
Status ExpandRle(const std::vector<uint32_t>& counts, int32_t height, int32_t width, uint8_t* out);

}  // namespace ferry

#endif  // FERRY_DATA_ANNOTATIONS_H_
