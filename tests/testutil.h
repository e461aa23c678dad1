// Helpers shared by the tests: temporary folders and real encoded images.
// Images are synthetic but real files (JPEG via libjpeg-turbo through OpenCV, PNG via
// libpng), with smooth gradients, shapes and noise so that codecs behave as on photos.
#ifndef FERRY_TESTS_TESTUTIL_H_
#define FERRY_TESTS_TESTUTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"

namespace ferry::testing {

// A fresh empty directory under $TMPDIR, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// 8-bit BGR pixels, row-major, w*h*3 bytes (or w*h for channels == 1).
std::vector<uint8_t> SyntheticPixels(int width, int height, uint64_t seed, int channels = 3);

std::string EncodeJpeg(int width, int height, uint64_t seed, int quality = 90, bool gray = false);
// channels: 1, 3 or 4 (alpha); depth: 8 or 16.
std::string EncodePng(int width, int height, uint64_t seed, int channels = 3, int depth = 8);

void WriteFile(const std::string& path, const std::string& bytes);
std::string ReadFile(const std::string& path);
void MakeDirs(const std::string& path);

// Builds root/<class_i>/img_<j>.jpg for classes "class_0".. with `per_class` JPEGs of
// sizes between 64 and 320 pixels a side. Returns the paths in ImageFolder order.
std::vector<std::string> MakeImageFolder(const std::string& root, int classes, int per_class,
                                         uint64_t seed = 1);

// ---- Hand-made and hostile encodings (for the decoders' error paths).

// `jpeg` with the size in its frame header (SOFn) replaced by width x height; the
// entropy-coded data is unchanged. Aborts if `jpeg` has no SOF segment.
std::string WithJpegSize(std::string jpeg, int width, int height);
// `png` with the size in its IHDR replaced (the chunk's CRC is left stale).
std::string WithPngSize(std::string png, uint32_t width, uint32_t height);
// `jpeg` with an APP1 Exif segment holding one IFD entry, Orientation (0x0112) =
// `orientation`, inserted after SOI; a little-endian ("II") or big-endian ("MM") TIFF.
std::string WithExifOrientation(const std::string& jpeg, int orientation, bool little_endian = false);
// A valid 1x1 GIF89a.
std::string TinyGif();
// A minimal grayscale TIFF whose first IFD claims `width` x `height` (LONGs) and whose
// one strip holds 16 bytes: a pixel bomb, little-endian ("II") or big-endian ("MM").
std::string TiffWithSize(uint32_t width, uint32_t height, bool little_endian);
// A JPEG SOI marker followed by `n` random bytes (no image).
std::string JpegSoiThenNoise(size_t n, uint64_t seed);

// ---- Time bounds for tests with threads, sockets and processes.

// Polls `condition` every few milliseconds until it holds (true) or `seconds` pass
// (false). For conditions nothing signals (another process, a counter in a service).
bool WaitFor(const std::function<bool()>& condition, double seconds);

// Aborts the test program with `what` if it is still alive after `seconds`: a hung
// socket or a lost wake-up fails fast and says where, instead of at CTest's timeout.
class Watchdog {
 public:
  Watchdog(double seconds, std::string what);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  Mutex mu_;
  CondVar cv_;
  bool done_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTUTIL_H_
