// PNG through libpng, with the transforms OpenCV 4.6's PngDecoder::readData asks of it
// for an 8-bit result (modules/imgcodecs/src/grfmt_png.cpp): 16-bit samples stripped
// to their high byte, alpha stripped, palettes expanded, gray of 1, 2 or 4 bits
// expanded to 8, gray made RGB (or colour made gray with libpng's own rgb_to_gray at
// 0.299/0.587), interlacing undone. The same calls on the same library give the same
// bytes.
#include <png.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "image/format_decoders.h"

namespace ferry {

namespace {

struct PngSource {
  const unsigned char* data;
  size_t size;
  size_t pos = 0;
  char error[160] = "";
};

void ReadFromMemory(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "the data ends inside the image");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

// libpng's errors end in a longjmp back to DecodePng; the message is kept for the Status.
[[noreturn]] void OnError(png_structp png, png_const_charp message) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->error, sizeof src->error, "%s", message);
  png_longjmp(png, 1);
}

void OnWarning(png_structp, png_const_charp) {}

// Owns libpng's structs; destroyed on every path out of DecodePng.
struct PngRead {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngRead() { png_destroy_read_struct(&png, info != nullptr ? &info : nullptr, nullptr); }
};

// The part under libpng's longjmp. Every C++ object it fills lives in the caller's frame
// (an automatic variable changed between setjmp and longjmp is indeterminate after it).
// False: libpng failed (src->error says why), or *status is set.
bool ReadPng(PngRead* r, PngSource* src, bool gray, int64_t max_pixels, cv::Mat* img, std::vector<png_bytep>* rows,
             Status* status) {
  if (setjmp(png_jmpbuf(r->png))) return false;
  png_set_read_fn(r->png, src, ReadFromMemory);
  png_read_info(r->png, r->info);
  png_uint_32 width = 0, height = 0;
  int depth = 0, color = 0;
  png_get_IHDR(r->png, r->info, &width, &height, &depth, &color, nullptr, nullptr, nullptr);
  if (*status = internal::CheckPixels("PNG", width, height, max_pixels); !status->ok()) return false;
  if (depth == 16) png_set_strip_16(r->png);
  png_set_strip_alpha(r->png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(r->png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0 && depth < 8) png_set_expand_gray_1_2_4_to_8(r->png);
  if (gray) {
    png_set_rgb_to_gray(r->png, 1, 0.299, 0.587);
  } else if ((color & PNG_COLOR_MASK_COLOR) == 0) {
    png_set_gray_to_rgb(r->png);
  }
  png_set_interlace_handling(r->png);
  png_read_update_info(r->png, r->info);
  if (png_get_rowbytes(r->png, r->info) != size_t(width) * (gray ? 1 : 3)) {
    *status = Status::DataLoss("unsupported PNG: " + std::to_string(depth) + "-bit colour type " + std::to_string(color));
    return false;
  }
  img->create(int(height), int(width), gray ? CV_8UC1 : CV_8UC3);
  rows->resize(height);
  for (png_uint_32 y = 0; y < height; ++y) (*rows)[y] = img->ptr<png_byte>(int(y));
  png_read_image(r->png, rows->data());
  png_read_end(r->png, nullptr);
  return true;
}

}  // namespace

Result<cv::Mat> DecodePng(std::string_view data, bool gray, int64_t max_pixels) {
  PngSource src{reinterpret_cast<const unsigned char*>(data.data()), data.size()};
  PngRead r;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, OnError, OnWarning);
  if (r.png == nullptr) return Status::ResourceExhausted("out of memory decoding PNG");
  r.info = png_create_info_struct(r.png);
  if (r.info == nullptr) return Status::ResourceExhausted("out of memory decoding PNG");
  cv::Mat img;
  std::vector<png_bytep> rows;
  Status status;
  if (!ReadPng(&r, &src, gray, max_pixels, &img, &rows, &status))
    return status.ok() ? Status::DataLoss(std::string("corrupt PNG: ") + src.error) : status;
  return img;
}

}  // namespace ferry
