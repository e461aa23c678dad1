// Ferry's own fast kernels: OpenCV resizes tuned for the fused decode, the colour
// jitter of ColorJitter's brightness/contrast/saturation, and the uint8 -> float32
// conversion with Normalize. These are the kernels of the original fixed pipeline;
// the pipelines that used them give the same pixels, at the same speed.
// Pure functions over pixel buffers; thread-safe.
#ifndef FERRY_OPS_KERNELS_PIXELS_H_
#define FERRY_OPS_KERNELS_PIXELS_H_

#include <cstdint>

#include <opencv2/core.hpp>

namespace ferry::kernels {

// Resizes src into dst (dst already allocated with the target size and type): area
// averaging when shrinking more than 2x (like PIL's antialiased bilinear), bilinear
// otherwise.
void ResizeInto(const cv::Mat& src, cv::Mat& dst);

// Bilinear resize (OpenCV INTER_LINEAR: half-pixel centres, clamped edges) of an
// interleaved uint8 window to out_w x out_h interleaved uint8 at `out` (rows
// contiguous), with an optional left-right mirror. Float32 output goes through these
// uint8 pixels too, as torchvision's does (PIL resizes to uint8, then ToTensor), so a
// float32 batch is exactly the normalize of the uint8 batch of the same spec.
// REQUIRES: the window is at most ~3x the output in each dimension, or bilinear
// aliases (the fused JPEG decode keeps windows within that); channels is 1 or 3.
void ResizeToUint8HWC(const cv::Mat& src, int out_w, int out_h, bool flip, uint8_t* out);

// Mirrors an interleaved 8-bit image left-right, in place (through scratch: two passes;
// for memory that must stay where it is, e.g. a batch row).
void HFlipInPlace(cv::Mat& img);
// Replaces `img` with its mirror image (one pass into new memory).
void HFlip(cv::Mat& img);

// ColorJitter's brightness, contrast and saturation, in the order given (0, 1, 2;
// factor 1 = the op is absent), on interleaved uint8: blends with black, with the
// rounded mean grey level, and with each pixel's own grey level.
struct JitterFactors {
  float brightness = 1.f, contrast = 1.f, saturation = 1.f;
  int order[3] = {0, 1, 2};
};
void ApplyJitter(uint8_t* pixels, int num_pixels, int channels, const JitterFactors& f);

// Writes an interleaved uint8 H x W x C image as float32 C x H x W:
// x * scale[c] + bias[c] (Normalize: scale = 1/(255 std), bias = -mean/std), mirrored
// left-right when `flip`. `stream`: with non-temporal stores (x86), for output that
// is not read back soon (a batch on its way out); false when the caller reads it next.
void WriteFloatCHW(const uint8_t* hwc, size_t row_stride, int height, int width, int channels, bool flip,
                   const float* scale, const float* bias, float* out, bool stream = true);

}  // namespace ferry::kernels

#endif  // FERRY_OPS_KERNELS_PIXELS_H_
