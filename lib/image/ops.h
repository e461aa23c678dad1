// The augmentation ops, with torchvision's semantics where torchvision has the op.
// Pure functions over pixel buffers; no decoding, no I/O. Thread-safe.
#ifndef FERRY_IMAGE_OPS_H_
#define FERRY_IMAGE_OPS_H_

#include <cstdint>

#include <opencv2/core.hpp>

#include "core/philox.h"
#include "ferry/pipeline_spec.h"

namespace ferry {

// torchvision.transforms.RandomResizedCrop.get_params on a W x H image: up to 10
// draws of (area fraction, log aspect ratio), then the central fallback. Rounding is
// Python's round() (half to even), offsets are uniform integers, as in torchvision.
cv::Rect RandomResizedCropBox(int width, int height, const PipelineSpec& spec, SampleRng& rng);

// The source window that Resize(resize_shorter) followed by CenterCrop(size) reads,
// mapped back to the W x H source, so the crop can happen before the resize.
cv::Rect CenterCropBox(int width, int height, const PipelineSpec& spec);

// Maps a window of the EXIF-oriented image to the stored image (orientation 1..8).
// stored_w/stored_h are the dimensions as stored in the file.
cv::Rect OrientedToStored(cv::Rect r, int orientation, int stored_w, int stored_h);
// Applies the EXIF orientation to pixels (a copy unless orientation == 1).
cv::Mat ApplyOrientation(const cv::Mat& stored, int orientation);

// Resizes src into dst (dst already allocated with the target size and type): area
// averaging when shrinking (like PIL's antialiased bilinear), bilinear when growing.
void ResizeInto(const cv::Mat& src, cv::Mat& dst);

// Bilinear resize (OpenCV INTER_LINEAR: half-pixel centres, clamped edges) of an
// interleaved uint8 window to size x size interleaved uint8, with an optional
// left-right mirror. Float32 output goes through these uint8 pixels too, as
// torchvision's (PIL resizes to uint8, then ToTensor), so a float32 batch is exactly
// the normalize of the uint8 batch of the same spec: a trainer that receives uint8
// and normalizes gets what a worker's float32 would have been. (An earlier fused
// float resize cost the same on this machine, 119 us against 84 + 33 us.)
// REQUIRES: the window is at most ~3x the output in each dimension, or bilinear
// aliases (the fused JPEG decode keeps windows within that); channels is 1 or 3.
void ResizeToUint8HWC(const cv::Mat& src, int size, bool flip, uint8_t* out);

// Mirrors an interleaved 8-bit image left-right, in place.
void HFlipInPlace(uint8_t* pixels, int width, int height, int channels);

struct JitterFactors {
  float brightness = 1.f, contrast = 1.f, saturation = 1.f;
  int order[3] = {0, 1, 2};  // torchvision applies the enabled ops in a random order
};
JitterFactors DrawJitter(const PipelineSpec& spec, SampleRng& rng);
// torchvision ColorJitter (brightness, contrast, saturation) on interleaved uint8.
void ApplyJitter(uint8_t* pixels, int num_pixels, int channels, const JitterFactors& f);

// Writes an interleaved uint8 HxWxC image as float32 CxHxW: (x/255 - mean)/std when
// spec.normalize, x/255 otherwise; mirrored left-right when `flip`.
void WriteFloatCHW(const uint8_t* hwc, int height, int width, int channels, bool flip,
                   const PipelineSpec& spec, float* out);

}  // namespace ferry

#endif  // FERRY_IMAGE_OPS_H_
