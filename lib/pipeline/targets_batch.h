// Targets between the stages: a source's annotations (data/annotations.h) become the
// targets the pipeline moves with the image (ops/targets.h), and a batch's moved
// targets become its named fields (ferry/batch.h BatchField), in memory of their own
// that the in-process Batch views and the wire references without a copy.
#ifndef FERRY_PIPELINE_TARGETS_BATCH_H_
#define FERRY_PIPELINE_TARGETS_BATCH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/annotations.h"
#include "data/dataset.h"
#include "ferry/batch.h"
#include "ferry/status.h"
#include "ops/targets.h"

namespace ferry {

// Boxes, labels, iscrowd, area and image id as they are; polygons to points; RLE masks
// expanded to rasters (InvalidArgument when their counts do not add up). `masks`:
// whether the masks are wanted at all (they cost a raster per crowd instance).
Status TargetsFromAnnotations(const SampleAnnotations& a, bool masks, SampleTargets* t);

// A job with targets needs a source with annotations: InvalidArgument otherwise.
Status CheckTargetSource(const std::vector<std::string>& targets, const Dataset& dataset);

// A PNG of class indices as a CV_8UC1 Mat: a palette PNG's indices (VOC's masks),
// or an 8-bit gray PNG's values (ADE20K, Cityscapes labelIds). InvalidArgument for
// other forms (RGB, 16-bit), DataLoss for a PNG that does not decode.
Result<cv::Mat> DecodeClassMask(const std::string& png);

struct PackedFields {
  std::vector<BatchField> fields;
  std::shared_ptr<void> owner;  // holds every field's memory
};

// The fields `names` (JobSpec::targets) of rows [0, num_rows) of `rows` (finished
// targets; rows past rows.size() are padding), for output images of out_h x out_w.
// Each tensor is 8-byte aligned and its memory rounded up to 8 bytes (the wire sends
// whole words). An instance without a mask gets an empty plane; a row without a
// semantic mask, zeros. "tokens" gives two fields: "tokens" int32 [B, token_length],
// each row's ids then `token_pad`, and "tokens_length" int32 [B] (padding rows: 0).
PackedFields PackFields(const std::vector<std::string>& names, const std::vector<SampleTargets>& rows,
                        int64_t num_rows, int out_h, int out_w, int32_t token_length = 0, int32_t token_pad = 0);

}  // namespace ferry

#endif  // FERRY_PIPELINE_TARGETS_BATCH_H_
