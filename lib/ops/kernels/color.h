// Colour and pixel ops of torchvision 0.14's functional API, reproducing what they compute on a PIL
// image (Pillow 9.4) bit for bit, and, with a `Tensor` suffix, what the same functional computes on a
// uint8 tensor (torchvision's AugMix converts PIL images with pil_to_tensor and runs the tensor ops).
//
// Contract shared by every function here:
//   - `img` is an interleaved 8-bit image, CV_8UC3 in RGB order or CV_8UC1, and may be a view with any
//     row step (a ROI of a larger image); it is modified in place. Grayscale() alone may replace `img`
//     with a new Mat, when the channel count changes.
//   - The result is a function of the pixels and the arguments only: no global state, no allocation
//     that outlives the call; calls on distinct images may run concurrently.
//   - A function returns false, leaving `img` untouched, when the image type or an argument is outside
//     its contract (where torchvision would raise); true otherwise. Nothing throws.
//   - Factors are doubles, as Python passes them: Pillow narrows them to float inside ImagingBlend,
//     while torchvision's tensor _blend uses float(ratio) and float(1.0 - ratio), which differ.
//
// Exactness: everything is bit-exact against Pillow 9.4 / torchvision 0.14 on CPU, except
// GaussianBlur (float convolution whose summation order is PyTorch's own: within one level) and the
// tensor contrast mean for images whose grey sum passes 2^24 (more than ~65K pixels at full white),
// where PyTorch's float32 sum is itself inexact.
#ifndef FERRY_OPS_KERNELS_COLOR_H_
#define FERRY_OPS_KERNELS_COLOR_H_

#include <opencv2/core.hpp>

namespace ferry::kernels {

// What these kernels take: a non-empty 8-bit image of 1 or 3 channels.
inline bool IsImage(const cv::Mat& m) { return !m.empty() && (m.type() == CV_8UC1 || m.type() == CV_8UC3); }

// ---------------------------------------------------------------------------------------------------
// Greyscale.

// PIL's convert("L"): (19595 R + 38470 G + 7471 B + 32768) >> 16. A CV_8UC1 source is copied.
// `dst` is (re)allocated as CV_8UC1 of the source's size; it may be the same object as `src`.
bool ToGray(const cv::Mat& src, cv::Mat& dst);

// torchvision's tensor rgb_to_grayscale on uint8: the float32 sum 0.2989 R + 0.587 G + 0.114 B,
// truncated. A CV_8UC1 source is copied. Same allocation rules as ToGray.
bool ToGrayTensor(const cv::Mat& src, cv::Mat& dst);

// F.rgb_to_grayscale (F_pil.to_grayscale) on a PIL image: the L image of ToGray, with 1 or 3 output
// channels (the L value repeated). When the channel count changes, `img` is replaced by a new
// contiguous Mat (a view's parent is then not written); an RGB image kept at 3 channels is written
// in place.
bool Grayscale(cv::Mat& img, int out_channels);

// ---------------------------------------------------------------------------------------------------
// Blends and the ImageEnhance family (F.adjust_* on PIL images).

// PIL's Image.blend(degenerate, img, alpha), written into `img`: per value,
// trunc(d + alpha * (i - d)) in float with alpha = float(alpha), clipped to [0, 255] when alpha is
// outside [0, 1]. `degenerate` has img's size and type (any step) and must not overlap `img`.
bool Blend(const cv::Mat& degenerate, cv::Mat& img, double alpha);

// ImageEnhance.Brightness(img).enhance(factor): Blend with black (a 256-entry table).
bool AdjustBrightness(cv::Mat& img, double factor);
// ImageEnhance.Contrast: Blend with the grey level int(mean(L) + 0.5) (a 256-entry table).
bool AdjustContrast(cv::Mat& img, double factor);
// ImageEnhance.Color: Blend with the L image repeated over the channels. Identity on CV_8UC1.
bool AdjustSaturation(cv::Mat& img, double factor);
// ImageEnhance.Sharpness: Blend with PIL's SMOOTH filter (3x3 kernel 1 1 1 / 1 5 1 / 1 1 1, over 13,
// rounded). PIL copies the first and last rows and columns unfiltered, and leaves images narrower
// or shorter than 3 pixels unfiltered.
bool AdjustSharpness(cv::Mat& img, double factor);

// F_pil.adjust_hue: PIL's RGB->HSV (Convert.c, its float and double arithmetic), H += the uint8 of
// np.uint8(hue_factor * 255) (truncated, wrapping), HSV->RGB. Identity on CV_8UC1.
// REQUIRES (else false): -0.5 <= hue_factor <= 0.5.
bool AdjustHue(cv::Mat& img, double hue_factor);

// ---------------------------------------------------------------------------------------------------
// ImageOps (F.posterize, F.solarize, F.invert, F.equalize, F.autocontrast on PIL images).

// Keeps the `bits` high bits of every value. REQUIRES (else false): 0 <= bits <= 8.
bool Posterize(cv::Mat& img, int bits);
// ImageOps.solarize: a value v >= threshold becomes 255 - v (torchvision passes the threshold as is).
bool Solarize(cv::Mat& img, double threshold);
// ImageOps.invert: 255 - v.
bool Invert(cv::Mat& img);
// ImageOps.equalize: per channel, step = (count of the non-empty bins but the last one) // 255; when
// step > 0, v -> min(255, (step // 2 + number of values below v) // step).
bool Equalize(cv::Mat& img);
// ImageOps.autocontrast (cutoff 0, no ignore): per channel with lo < hi, v -> clamp(int(v * scale +
// offset)) in double, scale = 255 / (hi - lo), offset = -lo * scale.
bool Autocontrast(cv::Mat& img);

// ---------------------------------------------------------------------------------------------------
// Blur.

// torchvision 0.14 F.gaussian_blur on a PIL image (it runs the tensor path): float32 1-D kernels
// exp(-0.5 (x / sigma)^2) over x = -(k-1)/2 .. (k-1)/2, normalised; 'reflect' padding (the edge
// pixel is not repeated); float32 convolution; round half to even. Matches within one level: this
// filters separably, PyTorch with the 2-D kernel in its own order (measured on photos: about one
// value in 10^5 differs, by 1).
// REQUIRES (else false): odd kernel sizes >= 1, sigmas > 0, and kernel_w / 2 < cols,
// kernel_h / 2 < rows (PyTorch's reflect padding refuses larger pads).
bool GaussianBlur(cv::Mat& img, int kernel_w, int kernel_h, double sigma_x, double sigma_y);

// ---------------------------------------------------------------------------------------------------
// Tensor-backend variants (torchvision's functional_tensor on F.pil_to_tensor(img), uint8).
// _blend(a, b, r) is trunc(clamp(float(r) * a + float(1.0 - r) * b, 0, 255)) in float32.

// _blend(img, 0, factor) (a 256-entry table).
bool AdjustBrightnessTensor(cv::Mat& img, double factor);
// _blend(img, mean, factor), mean = float32 mean of ToGrayTensor (of the values on CV_8UC1).
bool AdjustContrastTensor(cv::Mat& img, double factor);
// _blend(img, ToGrayTensor(img), factor). Identity on CV_8UC1.
bool AdjustSaturationTensor(cv::Mat& img, double factor);
// _blend(img, degenerate, factor): degenerate is round(conv3x3 / 13) inside, the image itself on the
// border rows and columns (which still go through the float blend). Identity when a side is <= 2.
bool AdjustSharpnessTensor(cv::Mat& img, double factor);
// autocontrast in float32: per channel with min < max, v -> trunc(min(255, (v - min) * scale)), where
// scale = (1 / (max - min)) * 255 (Python's `255.0 / tensor` is reciprocal, then multiply).
bool AutocontrastTensor(cv::Mat& img);

// These compute exactly what their PIL counterparts compute (checked against torchvision on tensors):
// posterize's img & -(2^(8-bits)), solarize's where(img >= threshold, 255 - img, img), 255 - img, and
// _scale_channel's bincount LUT (the same step rule and formula as ImageOps.equalize).
inline bool PosterizeTensor(cv::Mat& img, int bits) { return Posterize(img, bits); }
inline bool SolarizeTensor(cv::Mat& img, double threshold) { return Solarize(img, threshold); }
inline bool InvertTensor(cv::Mat& img) { return Invert(img); }
inline bool EqualizeTensor(cv::Mat& img) { return Equalize(img); }

}  // namespace ferry::kernels

#endif  // FERRY_OPS_KERNELS_COLOR_H_
