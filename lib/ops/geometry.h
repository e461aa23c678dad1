// Helpers the geometry ops share: torchvision's rounding and size rules, Ferry's
// resampler choice, and padding.
#ifndef FERRY_OPS_GEOMETRY_H_
#define FERRY_OPS_GEOMETRY_H_

#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include <opencv2/core.hpp>

#include "core/philox.h"
#include "ferry/status.h"
#include "ops/args.h"
#include "ops/op.h"

namespace ferry {

// Python's round(): half to even (std::nearbyint in the default rounding mode).
inline int PyRound(double v) { return int(std::nearbyint(v)); }

enum InterpMode : int { kNearest = 0, kBilinear = 1, kBicubic = 2 };

// Resamples `src` to dst's size (dst allocated by the caller, src's type; may be a
// view into a batch row) as torchvision's Resize does on PIL images: Pillow's own
// arithmetic for nearest, bilinear and bicubic (kernels::PilResize), bit for bit. A
// same-size resample is a copy, as torchvision returns the image unchanged.
void Resample(const cv::Mat& src, cv::Mat& dst, int interp);

// The fused decode's resample (a crop plan's window, already DCT-scaled to within 2x
// of the output): bilinear is OpenCV's fixed-point bilinear up to a 3x reduction and
// area averaging beyond (within about 2 levels of Pillow's antialiased bilinear and
// several times faster: the original pipeline's pixels); nearest and bicubic are
// Pillow's.
void ResampleFused(const cv::Mat& src, cv::Mat& dst, int interp);

// torchvision.transforms.RandomResizedCrop.get_params on a W x H image: up to 10
// draws of (area fraction, log aspect ratio), then the central fallback. Rounding is
// Python's round() (half to even), offsets are uniform integers, as in torchvision.
// Also RandomErasing's box rule is its own (random_erasing.cc).
cv::Rect RandomResizedCropBox(int width, int height, std::pair<double, double> scale,
                              std::pair<double, double> ratio, SampleRng& rng);

// A crop (`crop`, no resampling, in the coordinates of `first`'s output) after a crop
// plan `first` on a W x H image, as one plan: the crop's window mapped back to the
// source through the resample (rounded half to even, kept inside the image), at the
// crop's size. (Resize then CenterCrop reads this window of the source.)
CropPlan ComposeCropPlans(const CropPlan& first, const CropPlan& crop, int width, int height);

// torchvision's _compute_resized_output_size: (height, width) of a Resize of an
// H x W image to `size` (shorter side when `shorter`, else exactly (h, w)), with
// max_size (0: none) capping the longer side.
std::pair<int, int> ResizedSize(int height, int width, std::pair<int, int> size, bool shorter, int max_size);

// Padding as torchvision's F.pad on PIL images: left, top, right, bottom (negative
// values crop), mode "constant" (fill), "edge", "reflect" or "symmetric".
enum class PadMode { kConstant, kEdge, kReflect, kSymmetric };
cv::Mat Pad(const cv::Mat& img, const std::array<int, 4>& ltrb, const std::array<uint8_t, 3>& fill, PadMode mode);

// Reads torchvision's padding forms: int, [lr, tb] or [l, t, r, b] -> (l, t, r, b).
std::array<int, 4> PaddingArg(OpArgs& args, const char* key);
PadMode PadModeArg(OpArgs& args, const char* key);

}  // namespace ferry

#endif  // FERRY_OPS_GEOMETRY_H_
