#include "image/jpeg_decoder.h"

#include <algorithm>
#include <cstring>
#include <string>

#include <jerror.h>
#include <opencv2/imgproc.hpp>

namespace ferry {

namespace {

// A JPEG bomb can make a progressive decode take minutes with thousands of scans;
// TurboJPEG's TJFLAG_LIMITSCANS uses the same limit.
constexpr int kMaxScans = 500;

void ErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegDecoder::ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings that mean the pixels are wrong (data missing or garbled) are fatal for us:
// a sample must be either right or reported. Harmless ones (e.g. extraneous bytes
// before a marker, common in real photographs) are ignored, as PIL does.
void EmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;
  auto* err = reinterpret_cast<JpegDecoder::ErrorMgr*>(cinfo->err);
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE ||
      code == JWRN_MUST_RESYNC || code == JWRN_BOGUS_PROGRESSION || code == JWRN_NOT_SEQUENTIAL) {
    if (err->fatal_warning_code == 0) {
      err->fatal_warning_code = code;
      (*cinfo->err->format_message)(cinfo, err->message);
    }
  }
}

void ProgressMonitor(j_common_ptr cinfo) {
  if (cinfo->is_decompressor) {
    auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
    if (d->input_scan_number > kMaxScans) {
      auto* err = reinterpret_cast<JpegDecoder::ErrorMgr*>(cinfo->err);
      std::snprintf(err->message, sizeof err->message, "more than %d progressive scans", kMaxScans);
      std::longjmp(err->jump, 1);
    }
  }
}

uint16_t Get16(const uint8_t* p, bool le) { return le ? uint16_t(p[0] | p[1] << 8) : uint16_t(p[0] << 8 | p[1]); }
uint32_t Get32(const uint8_t* p, bool le) {
  return le ? uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24
            : uint32_t(p[3]) | uint32_t(p[2]) << 8 | uint32_t(p[1]) << 16 | uint32_t(p[0]) << 24;
}

// Adobe CMYK JPEGs store inverted values; others store plain CMYK.
void CmykToRgb(const uint8_t* src, uint8_t* dst, int n, bool inverted) {
  for (int i = 0; i < n; ++i, src += 4, dst += 3) {
    int c = src[0], m = src[1], y = src[2], k = src[3];
    if (!inverted) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
    dst[0] = uint8_t((c * k + 127) / 255);
    dst[1] = uint8_t((m * k + 127) / 255);
    dst[2] = uint8_t((y * k + 127) / 255);
  }
}

// A truncated file ends inside entropy-coded data, where 0xFF is always stuffed
// (FF 00), so FF D9 cannot appear in its tail. Checking costs nothing and catches
// truncation even where the crop window would never reach the missing rows.
bool HasEndOfImage(std::string_view d) {
  const size_t tail = std::min<size_t>(d.size(), 4096);
  for (size_t i = d.size() - 1; i + tail >= d.size() + 1 && i > 0; --i) {
    if (uint8_t(d[i - 1]) == 0xFF && uint8_t(d[i]) == 0xD9) return true;
  }
  return false;
}

// Smallest num (of num/8) whose scaled rect still covers the requested output size.
// Only 1/8, 2/8, 4/8 and 8/8: libjpeg-turbo has SIMD IDCTs for those. The other
// scales run plain C IDCTs (and 10x10..14x14 ones for 4:2:0 chroma), which made a
// DCT-scaled ROI decode slower than an unscaled one (ferry-micro-bench
// BM_JpegDecoder/2: 485 us with all eight scales, 428 us with powers of two, against
// 437 us unscaled). The final resize is then at most a 2x reduction.
// noinline: keeps its locals out of the frame that calls setjmp (-Wclobbered).
__attribute__((noinline)) int ChooseScaleNum(const cv::Rect& rect, int min_w, int min_h) {
  for (int n = 1; n < 8; n *= 2) {
    if (int64_t(rect.width) * n >= int64_t(min_w) * 8 && int64_t(rect.height) * n >= int64_t(min_h) * 8) return n;
  }
  return 8;
}

}  // namespace

int ParseExifOrientation(const uint8_t* d, size_t n) {
  if (n < 14 || std::memcmp(d, "Exif\0\0", 6) != 0) return 1;
  const uint8_t* t = d + 6;
  const size_t tn = n - 6;
  bool le;
  if (t[0] == 'I' && t[1] == 'I') le = true;
  else if (t[0] == 'M' && t[1] == 'M') le = false;
  else return 1;
  if (Get16(t + 2, le) != 42) return 1;
  const uint32_t ifd = Get32(t + 4, le);
  if (ifd > tn || tn - ifd < 2) return 1;
  const uint16_t count = Get16(t + ifd, le);
  for (uint32_t i = 0; i < count; ++i) {
    const size_t off = size_t(ifd) + 2 + size_t(i) * 12;
    if (off + 12 > tn) return 1;
    if (Get16(t + off, le) == 0x0112) {
      const uint16_t type = Get16(t + off + 2, le);
      if (type != 3) return 1;  // SHORT
      const int v = Get16(t + off + 8, le);
      return (v >= 1 && v <= 8) ? v : 1;
    }
  }
  return 1;
}

JpegDecoder::JpegDecoder() {
  std::memset(&cinfo_, 0, sizeof cinfo_);
  cinfo_.err = jpeg_std_error(&err_.pub);
  err_.pub.error_exit = ErrorExit;
  err_.pub.emit_message = EmitMessage;
  err_.fatal_warning_code = 0;
  jpeg_create_decompress(&cinfo_);
  progress_.progress_monitor = ProgressMonitor;
  cinfo_.progress = &progress_;
}

JpegDecoder::~JpegDecoder() { jpeg_destroy_decompress(&cinfo_); }

void JpegDecoder::Reset() {
  // jpeg_abort returns the object to its idle state, ready for the next image,
  // keeping its permanent memory. After a longjmp this is the documented recovery.
  jpeg_abort_decompress(&cinfo_);
  header_read_ = false;
  err_.fatal_warning_code = 0;
}

Status JpegDecoder::Fail(const char* what) {
  std::string m = std::string(what) + ": " + err_.message;
  Reset();
  return Status::DataLoss(std::move(m));
}

Result<JpegInfo> JpegDecoder::ReadHeader(std::string_view data, int64_t max_pixels) {
  Reset();
  if (data.size() < 4) return Status::DataLoss("corrupt JPEG: too short");
  if (!HasEndOfImage(data)) return Status::DataLoss("truncated JPEG: no end-of-image marker");
  data_ = data;
  if (setjmp(err_.jump)) return Fail("corrupt JPEG");
  jpeg_mem_src(&cinfo_, reinterpret_cast<const unsigned char*>(data.data()), data.size());
  jpeg_save_markers(&cinfo_, JPEG_APP0 + 1, 0xffff);
  if (jpeg_read_header(&cinfo_, TRUE) != JPEG_HEADER_OK) {
    Reset();
    return Status::DataLoss("corrupt JPEG: no image in file");
  }
  JpegInfo info;
  info.width = int(cinfo_.image_width);
  info.height = int(cinfo_.image_height);
  info.components = cinfo_.num_components;
  info.cmyk = cinfo_.jpeg_color_space == JCS_CMYK || cinfo_.jpeg_color_space == JCS_YCCK;
  if (info.width <= 0 || info.height <= 0) {  // libjpeg-turbo can "succeed" with no frame header
    Reset();
    return Status::DataLoss("corrupt JPEG: no frame header (image size 0)");
  }
  const int64_t pixels = int64_t(info.width) * info.height;
  if (pixels > max_pixels) {
    Reset();
    return Status::ResourceExhausted("image too large: " + std::to_string(info.width) + "x" +
                                     std::to_string(info.height) + " exceeds the limit of " +
                                     std::to_string(max_pixels) + " pixels");
  }
  for (jpeg_saved_marker_ptr m = cinfo_.marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1) {
      info.orientation = ParseExifOrientation(m->data, m->data_length);
      if (info.orientation != 1) break;
    }
  }
  header_read_ = true;
  return info;
}

Result<cv::Mat> JpegDecoder::DecodeRegion(cv::Rect rect, int min_w, int min_h, bool gray, double* scale_out) {
  if (!header_read_) return Status::FailedPrecondition("DecodeRegion before ReadHeader");
  const int W = int(cinfo_.image_width), H = int(cinfo_.image_height);
  rect &= cv::Rect(0, 0, W, H);
  if (rect.width <= 0 || rect.height <= 0) {
    Reset();
    return Status::InvalidArgument("empty crop window");
  }
  const int num = ChooseScaleNum(rect, min_w, min_h);
  const bool cmyk = cinfo_.jpeg_color_space == JCS_CMYK || cinfo_.jpeg_color_space == JCS_YCCK;
  const bool inverted = cinfo_.saw_Adobe_marker;
  if (setjmp(err_.jump)) return Fail("corrupt JPEG");
  cinfo_.scale_num = num;
  cinfo_.scale_denom = 8;
  cinfo_.out_color_space = cmyk ? JCS_CMYK : (gray ? JCS_GRAYSCALE : JCS_RGB);
  jpeg_start_decompress(&cinfo_);
  const int sw = int(cinfo_.output_width), sh = int(cinfo_.output_height);
  const int comps = cinfo_.output_components;
  // The rect in scaled coordinates, rounded outwards.
  const int x0 = int(int64_t(rect.x) * sw / W);
  const int x1 = std::min<int>(sw, int((int64_t(rect.x + rect.width) * sw + W - 1) / W));
  const int y0 = int(int64_t(rect.y) * sh / H);
  const int y1 = std::min<int>(sh, int((int64_t(rect.y + rect.height) * sh + H - 1) / H));
  // Crop with one column of margin on each side, and at least 5 columns: libjpeg-turbo
  // upsamples the chroma of a cropped scanline as if the crop's edges were the image's
  // (replicating the last sample), and without interpolation when the crop has 2 or
  // fewer chroma samples; either put wrong colours in the window's edge columns.
  int cx0 = std::max(0, x0 - 1), cx1 = std::min(sw, x1 + 1);
  if (cx1 - cx0 < 5) {
    cx1 = std::min(sw, cx0 + 5);
    cx0 = std::max(0, cx1 - 5);
  }
  JDIMENSION xoff = JDIMENSION(cx0), cw = JDIMENSION(cx1 - cx0);
  if (cw < JDIMENSION(sw)) jpeg_crop_scanline(&cinfo_, &xoff, &cw);  // widens to iMCU bounds
  const size_t stride = size_t(cw) * comps;
  buffer_.resize(stride * size_t(y1 - y0) + 64);
  if (y0 > 0) jpeg_skip_scanlines(&cinfo_, JDIMENSION(y0));
  for (int y = y0; y < y1;) {
    JSAMPROW row = buffer_.data() + size_t(y - y0) * stride;
    const JDIMENSION got = jpeg_read_scanlines(&cinfo_, &row, 1);
    if (got != 1) break;
    ++y;
  }
  if (err_.fatal_warning_code != 0) return Fail("corrupt JPEG");
  const int rows = y1 - y0;
  if (int(cinfo_.output_scanline) < y1) {
    Reset();
    return Status::DataLoss("corrupt JPEG: decoder stopped early");
  }
  jpeg_abort_decompress(&cinfo_);  // we may stop before the last row: that is the point
  header_read_ = false;
  if (scale_out) *scale_out = double(sw) / W;
  uint8_t* base = buffer_.data() + size_t(x0 - int(xoff)) * comps;
  if (cmyk) {
    // Convert in a second buffer region: RGB (or gray) rows of width x1-x0.
    const int w = x1 - x0;
    std::vector<uint8_t> rgb(size_t(w) * 3 * rows);
    for (int r = 0; r < rows; ++r) CmykToRgb(base + size_t(r) * stride, rgb.data() + size_t(r) * w * 3, w, inverted);
    cv::Mat m(rows, w, CV_8UC3, rgb.data());
    cv::Mat out;
    if (gray) cv::cvtColor(m, out, cv::COLOR_RGB2GRAY);
    else out = m.clone();
    return out;
  }
  return cv::Mat(rows, x1 - x0, comps == 1 ? CV_8UC1 : CV_8UC3, base, stride);
}

Result<cv::Mat> JpegDecoder::DecodeFull(bool gray) {
  const cv::Rect all(0, 0, int(cinfo_.image_width), int(cinfo_.image_height));
  return DecodeRegion(all, all.width, all.height, gray, nullptr);
}

}  // namespace ferry
