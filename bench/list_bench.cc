// ferry-list-bench: how long OpenImageFolder takes on an ImageNet-sized tree.
//
//   ferry-list-bench [--files N] [--classes C] [--dir D] [--repeats R]
//
// Builds D/<wnid>/<wnid>_<k>.JPEG (empty files; N over C classes, ImageNet's
// naming) unless D already holds a tree built with the same N and C, then lists it
// R times. Each run prints a line; the last line is the median run:
//   listing files=<N> seconds=<s> files_per_s=<x>
// Runs after the first find the directory entries in the kernel's cache (as a
// training job's later epochs and restarts do); the first run after building the
// tree does too, since building it filled that cache.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace {

// Creates the tree; returns false (after printing why) on failure.
bool BuildTree(const std::string& dir, int64_t files, int classes) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::perror(dir.c_str());
    return false;
  }
  char wnid[32], name[64];
  for (int c = 0; c < classes; ++c) {
    std::snprintf(wnid, sizeof wnid, "n%08d", 1440764 + c * 7919);
    const std::string class_dir = dir + "/" + wnid;
    if (::mkdir(class_dir.c_str(), 0755) != 0 && errno != EEXIST) {
      std::perror(class_dir.c_str());
      return false;
    }
    const int64_t per_class = files / classes + (c < files % classes ? 1 : 0);
    for (int64_t k = 0; k < per_class; ++k) {
      std::snprintf(name, sizeof name, "/%s_%lld.JPEG", wnid, static_cast<long long>(10000 + k));
      const std::string path = class_dir + name;
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) {
        std::perror(path.c_str());
        return false;
      }
      ::close(fd);
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times OpenImageFolder on an ImageNet-sized tree of empty files"};
  int64_t files = 1281167;
  int classes = 1000;
  int repeats = 3;
  std::string dir = "/tmp/ferry-list-bench";
  app.add_option("--files", files, "number of image files")->check(CLI::PositiveNumber);
  app.add_option("--classes", classes, "number of class folders")->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "where the tree is (built if missing)");
  app.add_option("--repeats", repeats, "listing runs")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  // A marker outside the class folders records what the tree holds; ImageFolder
  // ignores files directly under the root.
  const std::string marker =
      dir + "/.ferry-list-bench-" + std::to_string(files) + "-" + std::to_string(classes);
  struct stat st;
  if (::stat(marker.c_str(), &st) != 0) {
    std::printf("building %lld files in %d classes under %s\n", static_cast<long long>(files),
                classes, dir.c_str());
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    if (!BuildTree(dir, files, classes)) return 1;
    const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) ::close(fd);
    std::printf("built in %.1f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }

  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto ds = ferry::OpenImageFolder(dir);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!ds.ok()) {
      std::fprintf(stderr, "OpenImageFolder: %s\n", ds.status().ToString().c_str());
      return 1;
    }
    if ((*ds)->size() != files || static_cast<int>((*ds)->classes().size()) != classes) {
      std::fprintf(stderr, "expected %lld files in %d classes, listed %lld in %zu (is %s stale?)\n",
                   static_cast<long long>(files), classes, static_cast<long long>((*ds)->size()),
                   (*ds)->classes().size(), dir.c_str());
      return 1;
    }
    std::printf("run %d: seconds=%.3f fingerprint=%016llx issues=%zu\n", r, s,
                static_cast<unsigned long long>((*ds)->fingerprint()),
                (*ds)->listing_issues().size());
    seconds.push_back(s);
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  std::printf("listing files=%lld seconds=%.3f files_per_s=%.0f\n", static_cast<long long>(files),
              median, static_cast<double>(files) / median);
  return 0;
}
