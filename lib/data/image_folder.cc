// ImageFolder: root/<class>/**/<image>, listed exactly as
// torchvision.datasets.ImageFolder (make_dataset in torchvision/datasets/folder.py):
//
//   classes  = sorted(e.name for e in os.scandir(root) if e.is_dir())
//   for each class c, label = its index in classes:
//     for dirpath, _, fnames in sorted(os.walk(root/c, followlinks=True)):
//       for f in sorted(fnames): if f.lower().endswith(IMG_EXTENSIONS): sample
//
// Consequences we replicate:
//   - sorted(os.walk(...)) sorts the walked directories by their whole path, so a
//     class's own files come first, then its subdirectories in path order ("a/b" <
//     "a/b-c" < "a/b/x", since '-' < '/');
//   - is_dir() follows symlinks: a symlink to a directory is a class or is walked; a
//     dangling symlink is a file, listed if its name has an image extension;
//   - hidden entries are not special, and files directly under root are ignored.
// Sorting is by bytes, which equals Python's str order for UTF-8 names.
//
// Where we differ (each also recorded as a ListingIssue, never fatal):
//   - a directory named like an image ("x.jpg/") is reported, and walked as torchvision
//     walks it;
//   - a class folder with no images is reported (torchvision raises unless
//     allow_empty=True); it keeps its label;
//   - a directory that cannot be read is reported (os.walk skips it silently);
//   - a symlink loop is walked once and reported (os.walk repeats it until the path
//     is too long to resolve).
//
// Speed: one readdir pass per directory using d_type; a stat only for DT_LNK and
// DT_UNKNOWN entries. Paths are stored relative to root in one StringTable.
// Fingerprint: the kind, then each sample's relative path and label in order, so it
// does not depend on where root is mounted.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/hash.h"
#include "data/dataset.h"
#include "data/dataset_bases.h"
#include "data/file_util.h"
#include "data/source.h"

namespace ferry {
namespace {

constexpr std::string_view kKind = "image_folder";

class ImageFolderDataset final : public ListedDataset {
 public:
  ImageFolderDataset(std::string root, internal::StringTable rel_paths, Listing listing)
      : ListedDataset(std::move(listing)), root_(std::move(root)), rel_paths_(std::move(rel_paths)) {
    FERRY_CHECK(rel_paths_.size() == static_cast<int64_t>(listing_.labels.size()));
  }

  int64_t size() const override { return rel_paths_.size(); }
  std::string Path(int64_t index) const override {
    return internal::JoinPath(root_, rel_paths_.Get(index));
  }
  Status ReadSample(int64_t index, std::string* out) const override {
    return internal::ReadWholeFile(Path(index), out);
  }

 private:
  const std::string root_;
  const internal::StringTable rel_paths_;  // relative to root_, e.g. "cat/001.jpg"
};

// An open directory stream; closes it (and its fd) on destruction.
class ScopedDir {
 public:
  explicit ScopedDir(DIR* d) : d_(d) {}
  ~ScopedDir() {
    if (d_ != nullptr) ::closedir(d_);
  }
  ScopedDir(const ScopedDir&) = delete;
  ScopedDir& operator=(const ScopedDir&) = delete;
  DIR* get() const { return d_; }
  int fd() const { return ::dirfd(d_); }

 private:
  DIR* d_;
};

// Whether entry `e` of the directory open as `dir_fd` is a directory, following
// symlinks like Python's DirEntry.is_dir(): an entry that cannot be stat'ed (a
// dangling symlink, a loop) is not a directory.
bool IsDirectory(int dir_fd, const dirent& e) {
  switch (e.d_type) {
    case DT_DIR:
      return true;
    case DT_LNK:
    case DT_UNKNOWN: {
      struct stat st;
      return ::fstatat(dir_fd, e.d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
    }
    default:
      return false;
  }
}

// The entries of one directory, split like os.walk splits them.
struct DirEntries {
  std::vector<std::string> image_files;  // non-directories with an image extension
  std::vector<std::string> subdirs;
};

// Reads all entries of `d`. Returns 0, or the errno of a failed readdir (the
// entries read before it are kept).
int ReadEntries(const ScopedDir& d, DirEntries* out) {
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d.get());
    if (e == nullptr) return errno;
    const char* name = e->d_name;
    if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) continue;
    if (IsDirectory(d.fd(), *e)) {
      out->subdirs.emplace_back(name);
    } else if (HasImageExtension(name)) {
      out->image_files.emplace_back(name);
    }
  }
}

// Walks one class folder the way os.walk(followlinks=True) does and collects, per
// directory, its image files. Thread-compatible; one walker per class.
class ClassWalker {
 public:
  ClassWalker(const std::string& root, std::vector<ListingIssue>* issues)
      : root_(root), issues_(issues) {}

  // Walks the directory `name` of the directory open as `parent_fd`; `rel` is its
  // path relative to root.
  void Walk(int parent_fd, const std::string& name, const std::string& rel) {
    const int fd = ::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      Issue(rel, "cannot list directory: " + internal::ErrnoText(errno));
      return;
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      Issue(rel, "cannot list directory: " + internal::ErrnoText(errno));
      ::close(fd);
      return;
    }
    const std::pair<dev_t, ino_t> id(st.st_dev, st.st_ino);
    if (std::find(ancestors_.begin(), ancestors_.end(), id) != ancestors_.end()) {
      Issue(rel, "symlink loop: directory is already being listed; not descending again");
      ::close(fd);
      return;
    }
    ScopedDir dir(::fdopendir(fd));
    if (dir.get() == nullptr) {
      Issue(rel, "cannot list directory: " + internal::ErrnoText(errno));
      ::close(fd);
      return;
    }
    DirEntries entries;
    if (const int err = ReadEntries(dir, &entries); err != 0) {
      Issue(rel, "error while listing directory: " + internal::ErrnoText(err));
    }
    if (!entries.image_files.empty()) {
      std::sort(entries.image_files.begin(), entries.image_files.end());
      found_.push_back({rel, std::move(entries.image_files)});
    }
    std::sort(entries.subdirs.begin(), entries.subdirs.end());
    ancestors_.push_back(id);
    for (const std::string& sub : entries.subdirs) {
      std::string sub_rel = rel + "/" + sub;
      if (HasImageExtension(sub)) Issue(sub_rel, "is a directory");
      Walk(dir.fd(), sub, sub_rel);
    }
    ancestors_.pop_back();
  }

  // Appends the files found so far to `paths` (relative to root) in torchvision's
  // order, with `label`; returns how many. Resets the walker.
  int64_t Emit(int32_t label, internal::StringTable* paths, std::vector<int32_t>* labels) {
    std::sort(found_.begin(), found_.end(),
              [](const FoundDir& a, const FoundDir& b) { return a.rel < b.rel; });
    int64_t n = 0;
    std::string buf;
    for (const FoundDir& d : found_) {
      for (const std::string& f : d.files) {
        buf.assign(d.rel);
        buf += '/';
        buf += f;
        paths->Append(buf);
        labels->push_back(label);
        ++n;
      }
    }
    found_.clear();
    return n;
  }

 private:
  struct FoundDir {
    std::string rel;                 // directory path relative to root
    std::vector<std::string> files;  // sorted image file names
  };

  void Issue(const std::string& rel, std::string reason) {
    issues_->push_back({internal::JoinPath(root_, rel), std::move(reason)});
  }

  const std::string& root_;
  std::vector<ListingIssue>* issues_;
  std::vector<FoundDir> found_;
  std::vector<std::pair<dev_t, ino_t>> ancestors_;  // directories on the current path
};

}  // namespace

Result<std::unique_ptr<Dataset>> OpenImageFolder(const std::string& root) {
  if (root.empty()) return Status::InvalidArgument("ImageFolder: empty root path");
  const int root_fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) {
    if (errno == ENOTDIR) return Status::InvalidArgument(root + ": not a directory");
    return internal::ErrnoToStatus(errno, root);
  }
  ScopedDir root_dir(::fdopendir(root_fd));
  if (root_dir.get() == nullptr) {
    const int err = errno;
    ::close(root_fd);
    return internal::ErrnoToStatus(err, root);
  }
  DirEntries top;
  if (const int err = ReadEntries(root_dir, &top); err != 0) {
    return internal::ErrnoToStatus(err, root);
  }
  std::vector<std::string> classes = std::move(top.subdirs);
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) {
    return Status::NotFound(root + ": no class folders (ImageFolder expects root/<class>/<image>)");
  }
  if (classes.size() > static_cast<size_t>(INT32_MAX)) {
    return Status::InvalidArgument(root + ": too many class folders");
  }

  internal::StringTable paths;
  std::vector<int32_t> labels;
  std::vector<ListingIssue> issues;
  ClassWalker walker(root, &issues);
  for (size_t c = 0; c < classes.size(); ++c) {
    walker.Walk(root_dir.fd(), classes[c], classes[c]);
    if (walker.Emit(static_cast<int32_t>(c), &paths, &labels) == 0) {
      issues.push_back({internal::JoinPath(root, classes[c]),
                        "class folder has no image files (its label is kept)"});
    }
  }
  if (paths.size() == 0) {
    return Status::NotFound(root +
                            ": no image files in any class folder (extensions: .jpg .jpeg .png "
                            ".ppm .bmp .pgm .tif .tiff .webp)");
  }
  paths.ShrinkToFit();
  labels.shrink_to_fit();

  Fingerprinter fp;
  fp.Add(kKind);
  for (int64_t i = 0; i < paths.size(); ++i) {
    fp.Add(paths.Get(i));
    fp.AddU64(static_cast<uint64_t>(labels[static_cast<size_t>(i)]));
  }
  ListedDataset::Listing listing{.kind = kKind,
                                 .classes = std::move(classes),
                                 .labels = std::move(labels),
                                 .issues = std::move(issues),
                                 .fingerprint = fp.Finish()};
  return std::unique_ptr<Dataset>(new ImageFolderDataset(root, std::move(paths), std::move(listing)));
}

void RegisterImageFolderSource() {
  RegisterSource({
      .name = std::string(kKind),
      .summary = "a folder (ImageFolder: root/<class>/<image>)",
      .claims = [](const SourceSpec& s) { return s.is_dir; },
      .open = [](const SourceSpec& s, const DataRoots&) { return OpenImageFolder(s.text); },
  });
}

}  // namespace ferry
