#include "testutil.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <sstream>

#include "core/philox.h"

namespace ferry::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "ferry_test_XXXXXX").string();
  char* made = mkdtemp(tmpl.data());
  if (made == nullptr) std::abort();
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<uint8_t> SyntheticPixels(int width, int height, uint64_t seed, int channels) {
  SampleRng rng(seed, 0, 0, 7);
  cv::Mat img(height, width, CV_8UC3);
  const double fx = rng.Uniform(0.5, 3.0), fy = rng.Uniform(0.5, 3.0);
  const int base[3] = {int(rng.Below(256)), int(rng.Below(256)), int(rng.Below(256))};
  for (int y = 0; y < height; ++y) {
    auto* row = img.ptr<uint8_t>(y);
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        const double v = base[c] + 60 * std::sin(fx * x / width * 6.28 + c) +
                         60 * std::cos(fy * y / height * 6.28 - c);
        row[3 * x + c] = cv::saturate_cast<uint8_t>(v);
      }
    }
  }
  for (int k = 0; k < 6; ++k) {
    cv::circle(img, {int(rng.Below(width)), int(rng.Below(height))},
               int(rng.Below(std::max(2, std::min(width, height) / 3))) + 1,
               cv::Scalar(rng.Below(256), rng.Below(256), rng.Below(256)), -1);
  }
  cv::Mat noise(height, width, CV_8UC3);
  cv::randu(noise, 0, 12);
  img += noise;
  if (channels == 1) cv::cvtColor(img, img, cv::COLOR_BGR2GRAY);
  return std::vector<uint8_t>(img.data, img.data + img.total() * img.elemSize());
}

static cv::Mat PixelsMat(int width, int height, uint64_t seed, int channels) {
  auto px = SyntheticPixels(width, height, seed, channels);
  cv::Mat m(height, width, channels == 1 ? CV_8UC1 : CV_8UC3, px.data());
  return m.clone();
}

std::string EncodeJpeg(int width, int height, uint64_t seed, int quality, bool gray) {
  cv::Mat m = PixelsMat(width, height, seed, gray ? 1 : 3);
  std::vector<uint8_t> out;
  cv::imencode(".jpg", m, out, {cv::IMWRITE_JPEG_QUALITY, quality});
  return std::string(out.begin(), out.end());
}

std::string EncodePng(int width, int height, uint64_t seed, int channels, int depth) {
  cv::Mat m = PixelsMat(width, height, seed, channels == 1 ? 1 : 3);
  if (channels == 4) cv::cvtColor(m, m, cv::COLOR_BGR2BGRA);
  if (depth == 16) m.convertTo(m, channels == 1 ? CV_16UC1 : (channels == 4 ? CV_16UC4 : CV_16UC3), 257.0);
  std::vector<uint8_t> out;
  cv::imencode(".png", m, out);
  return std::string(out.begin(), out.end());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) std::abort();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void MakeDirs(const std::string& path) { fs::create_directories(path); }

std::vector<std::string> MakeImageFolder(const std::string& root, int classes, int per_class,
                                         uint64_t seed) {
  std::vector<std::string> paths;
  SampleRng rng(seed, 0, 0, 8);
  for (int c = 0; c < classes; ++c) {
    const std::string dir = root + "/class_" + std::to_string(c);
    MakeDirs(dir);
    for (int j = 0; j < per_class; ++j) {
      char name[32];
      std::snprintf(name, sizeof name, "img_%04d.jpg", j);
      const int w = 64 + int(rng.Below(257)), h = 64 + int(rng.Below(257));
      WriteFile(dir + "/" + name, EncodeJpeg(w, h, seed * 1000003 + c * 1000 + j, 85));
      paths.push_back(dir + "/" + name);
    }
  }
  return paths;
}

}  // namespace ferry::testing
