// JpegDecoder: region-of-interest, DCT-scaled JPEG decoding with the libjpeg API of
// libjpeg-turbo.
//
// Why not TurboJPEG's tjDecompress2: it decodes the whole image. Entropy decoding
// dominates JPEG decode time (DCT scaling alone gains only 16% at 1/2), so the win
// comes from not touching what the crop does not need:
//   - rows below the crop are never entropy-decoded (we stop early);
//   - rows above it are skipped with jpeg_skip_scanlines (entropy-decoded, but no
//     IDCT, upsampling or colour conversion);
//   - columns outside it are cropped with jpeg_crop_scanline (no IDCT for them);
//   - the largest DCT scale (num/8) that still leaves >= the output size is used.
//
// Usage per image: ReadHeader(), then at most one DecodeRegion(). A decoder is
// thread-compatible (use one per thread) and reuses its memory across images.
// Errors are libjpeg's own messages, as Status::DataLoss / InvalidArgument.
#ifndef FERRY_IMAGE_JPEG_DECODER_H_
#define FERRY_IMAGE_JPEG_DECODER_H_

#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string_view>
#include <vector>

#include <jpeglib.h>

#include <opencv2/core.hpp>

#include "ferry/status.h"

namespace ferry {

struct JpegInfo {
  int width = 0;         // as stored (before EXIF orientation)
  int height = 0;
  int orientation = 1;   // EXIF orientation 1..8
  int components = 0;
  bool cmyk = false;     // CMYK or YCCK
};

class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Parses the headers of `data` (which must outlive the following DecodeRegion call).
  // Refuses images with more than `max_pixels` pixels before any pixel allocation.
  Result<JpegInfo> ReadHeader(std::string_view data, int64_t max_pixels);

  // Decodes the stored-orientation rectangle `rect` of the image whose header was
  // just read, at the smallest DCT scale s in {1/8..8/8} with rect*s >= (min_w, min_h)
  // (or 1 if none is). Returns a view (valid until the next call) of the scaled rect,
  // CV_8UC3 RGB or CV_8UC1 gray. `scale_out` receives the scale used.
  Result<cv::Mat> DecodeRegion(cv::Rect rect, int min_w, int min_h, bool gray, double* scale_out);

  // Full decode at scale 1 (tests and benchmarks).
  Result<cv::Mat> DecodeFull(bool gray);

  struct ErrorMgr {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    int fatal_warning_code;
  };

 private:
  void Reset();
  Status Fail(const char* what);

  jpeg_decompress_struct cinfo_;
  ErrorMgr err_;
  jpeg_progress_mgr progress_;
  std::vector<uint8_t> buffer_;
  std::string_view data_;
  bool header_read_ = false;
};

// Parses the EXIF orientation (1..8) from an APP1 payload; 1 when absent or invalid.
int ParseExifOrientation(const uint8_t* data, size_t size);

}  // namespace ferry

#endif  // FERRY_IMAGE_JPEG_DECODER_H_
