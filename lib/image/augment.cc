#include "image/augment.h"

#include <exception>
#include <string>

#include <opencv2/imgproc.hpp>

#include "core/check.h"
#include "core/histogram.h"
#include "core/philox.h"
#include "image/image_decoder.h"
#include "image/jpeg_decoder.h"
#include "image/ops.h"

namespace ferry {

namespace {

// Memory each thread reuses across samples, so the steady state allocates nothing.
struct Scratch {
  JpegDecoder jpeg;
  cv::Mat resized;  // size x size x C uint8, when the output is not uint8 itself
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

SampleProcessor::SampleProcessor(const PipelineSpec& spec) : spec_(spec) {
  FERRY_CHECK(spec_.Validate().ok());
}

Status SampleProcessor::Process(std::string_view encoded, uint64_t seed, uint64_t epoch, int64_t index,
                                void* out, int64_t* decoded_ns) const {
  if (encoded.empty()) return Status::DataLoss("zero-byte file");
  const bool gray = spec_.color == PipelineSpec::Color::kGray;
  const int size = spec_.size, channels = spec_.channels();
  Scratch& scratch = ThreadScratch();
  SampleRng crop_rng(seed, epoch, uint64_t(index), kRngCrop);

  try {
    cv::Mat region;  // the crop window, oriented, RGB or gray, at any resolution
    const ImageFormat format = SniffFormat(encoded);
    if (format == ImageFormat::kJpeg) {
      FERRY_ASSIGN_OR_RETURN(JpegInfo info, scratch.jpeg.ReadHeader(encoded, spec_.max_pixels));
      const bool swap = info.orientation >= 5;
      const int ow = swap ? info.height : info.width, oh = swap ? info.width : info.height;
      const cv::Rect box = spec_.geometry == PipelineSpec::Geometry::kRandomResizedCrop
                               ? RandomResizedCropBox(ow, oh, spec_, crop_rng)
                               : CenterCropBox(ow, oh, spec_);
      const cv::Rect stored = OrientedToStored(box, info.orientation, info.width, info.height);
      cv::Mat raw;
      if (spec_.roi_decode) {
        FERRY_ASSIGN_OR_RETURN(raw, scratch.jpeg.DecodeRegion(stored, size, size, gray, nullptr));
      } else {
        FERRY_ASSIGN_OR_RETURN(cv::Mat full, scratch.jpeg.DecodeFull(gray));
        raw = full(stored);
      }
      region = ApplyOrientation(raw, info.orientation);
    } else if (format == ImageFormat::kUnknown) {
      return Status::InvalidArgument("not an image: unrecognized file signature");
    } else if (format == ImageFormat::kGif) {
      return Status::Unimplemented("unsupported image format: GIF");
    } else {
      FERRY_ASSIGN_OR_RETURN(cv::Mat img, DecodeWithOpenCV(format, encoded, gray, spec_.max_pixels));
      const cv::Rect box = spec_.geometry == PipelineSpec::Geometry::kRandomResizedCrop
                               ? RandomResizedCropBox(img.cols, img.rows, spec_, crop_rng)
                               : CenterCropBox(img.cols, img.rows, spec_);
      region = img(box);
    }

    if (decoded_ns != nullptr) *decoded_ns = MonoNs();
    bool flip = false;
    if (spec_.hflip_p > 0) {
      SampleRng flip_rng(seed, epoch, uint64_t(index), kRngFlip);
      flip = flip_rng.Bernoulli(spec_.hflip_p);
    }
    const bool jitter = spec_.brightness > 0 || spec_.contrast > 0 || spec_.saturation > 0;
    const bool to_uint8 = spec_.output == PipelineSpec::Output::kUint8NHWC;
    // The fused JPEG decode leaves windows within 2x of the output, except where a
    // non-square window's shorter side forced a larger DCT scale (up to ~2.7x on the
    // long side). Up to 3x the 2-tap bilinear skips few enough pixels for training
    // crops; beyond that (other formats, roi_decode off) area averaging is used.
    const bool near = region.cols <= 3 * size && region.rows <= 3 * size;
    if (near && !jitter && to_uint8) {
      // The common path: one pass from the decoded window to the batch row.
      ResizeToUint8HWC(region, size, flip, static_cast<uint8_t*>(out));
      return Status::OK();
    }
    // Otherwise resize to uint8 (area averaging when shrinking more than 3x), then
    // jitter, then mirror / convert into the batch row. Float32 goes through uint8 as
    // torchvision's does, so it is exactly the normalize of the uint8 output.
    const int type = channels == 1 ? CV_8UC1 : CV_8UC3;
    cv::Mat direct_view;
    if (to_uint8) direct_view = cv::Mat(size, size, type, out);
    else scratch.resized.create(size, size, type);
    cv::Mat& small = to_uint8 ? direct_view : scratch.resized;
    if (near) ResizeToUint8HWC(region, size, false, small.data);
    else ResizeInto(region, small);
    if (jitter) {
      SampleRng jitter_rng(seed, epoch, uint64_t(index), kRngJitter);
      ApplyJitter(small.data, size * size, channels, DrawJitter(spec_, jitter_rng));
    }
    if (to_uint8) {
      if (flip) HFlipInPlace(small.data, size, size, channels);
    } else {
      WriteFloatCHW(small.data, size, size, channels, flip, spec_, static_cast<float*>(out));
    }
    return Status::OK();
  } catch (const cv::Exception& e) {
    return Status::DataLoss(std::string("image processing failed: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("out of memory while decoding");
  }
}

}  // namespace ferry
