#include "image/augment.h"

#include <exception>
#include <string>

#include <opencv2/imgproc.hpp>

#include "core/check.h"
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

SampleProcessor::SampleProcessor(const PipelineSpec& spec) : spec_(spec) { FERRY_CHECK(spec_.Validate().ok()); }

Status SampleProcessor::Process(std::string_view encoded, uint64_t seed, uint64_t epoch, int64_t index,
                                void* out) const {
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

    const int type = channels == 1 ? CV_8UC1 : CV_8UC3;
    const bool direct = spec_.output == PipelineSpec::Output::kUint8NHWC;
    // With uint8 output, resize writes straight into the batch row; otherwise into
    // per-thread scratch that the float conversion then reads once.
    cv::Mat direct_view;
    if (direct) direct_view = cv::Mat(size, size, type, out);
    else scratch.resized.create(size, size, type);
    cv::Mat& small = direct ? direct_view : scratch.resized;
    ResizeInto(region, small);

    bool flip = false;
    if (spec_.hflip_p > 0) {
      SampleRng flip_rng(seed, epoch, uint64_t(index), kRngFlip);
      flip = flip_rng.Bernoulli(spec_.hflip_p);
    }
    if (spec_.brightness > 0 || spec_.contrast > 0 || spec_.saturation > 0) {
      SampleRng jitter_rng(seed, epoch, uint64_t(index), kRngJitter);
      ApplyJitter(small.data, size * size, channels, DrawJitter(spec_, jitter_rng));
    }
    if (direct) {
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
