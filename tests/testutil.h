// Helpers shared by the tests: temporary folders and real encoded images.
// Images are synthetic but real files (JPEG via libjpeg-turbo through OpenCV, PNG via
// libpng), with smooth gradients, shapes and noise so that codecs behave as on photos.
#ifndef FERRY_TESTS_TESTUTIL_H_
#define FERRY_TESTS_TESTUTIL_H_

#include <cstdint>
#include <string>
#include <vector>

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

}  // namespace ferry::testing

#endif  // FERRY_TESTS_TESTUTIL_H_
