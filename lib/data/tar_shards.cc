// TarShards: WebDataset-style .tar shards, read in place.
//
// Tar format (what we parse; POSIX.1-1988 ustar, GNU and POSIX.1-2001 pax):
//   The archive is a sequence of 512-byte blocks. Each member is one header block
//   followed by its data, padded to a multiple of 512. A zero block ends the archive.
//   Header fields used: name[100]@0, size[12]@124 (octal, or GNU base-256 when the
//   top bit of the first byte is set), chksum[8]@148, typeflag@156, magic[6]@257,
//   prefix[155]@345 (POSIX ustar only: "ustar\0").
//   The checksum is the sum of the 512 header bytes with chksum read as spaces
//   (unsigned; historic signed sums are accepted too).
//   typeflag '0', '\0', '7': a regular file, a candidate member.
//            'L' (GNU): its data is the name of the next member.
//            'x' (pax): "<len> <key>=<value>\n" records for the next member; we use
//                       path= and size=.
//            '1'..'6' (links, devices, directories, FIFOs): no data, skipped.
//            anything else ('g', 'K', 'S', vendor types): data skipped.
//
// Grouping (WebDataset's convention): a member path splits into key and extension
// at the first '.' of its basename ("d/n0001.seg.png" -> key "d/n0001", extension
// "seg.png"); extensions are lower-cased; a basename with no '.' before other text
// is not part of any sample. The members of a shard with the same key form one
// group. (WebDataset itself groups only consecutive members; we also accept shards
// whose members were added in directory order, as a plain `tar cf` does. For shards
// written by WebDataset's tools the result is the same.) A group is a sample when it
// has an image member (jpg jpeg png webp bmp ppm pgm tif tiff; the first one wins)
// and a `cls` member whose text is a non-negative integer, or no `cls` but a `txt`
// (a caption) or `json` (metadata) member, up to 1 MiB each (image-text data; its
// label is 0), or a `seg.png` / `mask.png` member (a PNG of class indices, palette or
// gray: semantic segmentation data). Such a dataset has annotations: each sample's
// caption, JSON and mask are read with it (ReadAnnotations: the batch fields "text",
// "meta" and "semantic"; where no source pixel lands the mask holds 255, the
// "ignore" class of VOC and Cityscapes, as the segmentation folders do). Other groups are
// ListingIssues "shard.tar:key", which never quote a member's bytes. Order: shard
// order, then the order in which each key first appears in its shard.
//
// Fingerprint: the kind, then per sample its shard's file name (not its folder),
// its image member's path and its label (and its txt, json and mask members' paths).
//
// Each shard keeps one fd open for the dataset's lifetime; ReadSample is a pread at
// the image member's offset, so it is thread-safe.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <algorithm>
#include <charconv>
#include <cstring>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/hash.h"
#include "data/dataset.h"
#include "data/dataset_bases.h"
#include "data/file_util.h"
#include "data/read_ahead.h"
#include "data/source.h"
#include "data/data_roots.h"
#include "store/disk_cache.h"
#include "store/object_store.h"

namespace ferry {
namespace {

constexpr std::string_view kTarShardsKind = "tar_shards";
constexpr size_t kBlock = 512;
// Bounds on the metadata members we read into memory at open time.
constexpr uint64_t kMaxNameBytes = uint64_t{1} << 20;  // 'L' and 'x' members
constexpr uint64_t kMaxClsBytes = 256;
constexpr uint64_t kMaxTextBytes = uint64_t{1} << 20;  // a caption or a sample's JSON
constexpr uint8_t kTarMaskFill = 255;                  // a mask's value where no source pixel lands

// Where a shard's bytes are: a local file (pread) or an object (Range requests).
class ShardSource {
 public:
  virtual ~ShardSource() = default;
  virtual uint64_t size() const = 0;
  // Exactly n bytes at off; thread-safe. Errors name the shard.
  virtual Status ReadAt(uint64_t off, size_t n, char* dst) const = 0;
  virtual bool remote() const { return false; }
};

class FileShard final : public ShardSource {
 public:
  FileShard(internal::ScopedFd fd, uint64_t size, std::string path)
      : fd_(std::move(fd)), size_(size), path_(std::move(path)) {}
  uint64_t size() const override { return size_; }
  Status ReadAt(uint64_t off, size_t n, char* dst) const override {
    return internal::PreadFully(fd_.get(), off, n, dst, path_);
  }

 private:
  internal::ScopedFd fd_;
  uint64_t size_;
  std::string path_;
};

class ObjectShard final : public ShardSource {
 public:
  ObjectShard(store::ObjectUrl url, uint64_t size) : url_(std::move(url)), size_(size) {}
  uint64_t size() const override { return size_; }
  Status ReadAt(uint64_t off, size_t n, char* dst) const override {
    if (local_ != nullptr) return internal::PreadFully(local_->fd, local_->offset + off, n, dst, url_.ToString());
    thread_local std::string buf;
    FERRY_RETURN_IF_ERROR(store::ObjectStore::Get().Read(url_, off, n, &buf, internal::kMaxSampleBytes));
    std::memcpy(dst, buf.data(), n);
    return Status::OK();
  }
  bool remote() const override { return local_ == nullptr; }
  const store::ObjectUrl& url() const { return url_; }
  // The whole shard in the worker's cache (store/disk_cache.h): members are read from
  // there, not from the store. Before the dataset is shared.
  void SetLocal(std::unique_ptr<store::DiskCache::Span> local) { local_ = std::move(local); }
  // The cache's key of the whole shard.
  std::string CacheKey() const { return url_.ToString() + "#0+all"; }

 private:
  store::ObjectUrl url_;
  uint64_t size_;
  std::unique_ptr<store::DiskCache::Span> local_;
};

// A shard read from front to back while it is listed. An object streams whole, in 8 MiB
// ranges one after another (a request per 8 MiB, not one per 512-byte header), every
// byte passed to `sink` in order (the cache keeps the shard); a file is read where asked.
class SequentialReader {
 public:
  SequentialReader(const ShardSource& src, store::DiskCache::Writer* sink) : src_(src), sink_(sink) {}
  Status ReadAt(uint64_t off, size_t n, char* dst) {
    if (!src_.remote()) return src_.ReadAt(off, n, dst);
    if (off < start_) return Status::Internal("a shard read backwards while listed");
    while (off + n > end_) FERRY_RETURN_IF_ERROR(Next());
    std::memcpy(dst, buf_.data() + (off - start_), n);
    if (off - start_ > kChunk) {  // what lies before `off` is not read again: let it go
      buf_.erase(0, size_t(off - start_));
      start_ = off;
    }
    return Status::OK();
  }
  // The rest of the object (the end-of-archive blocks and any padding), for the sink.
  Status Finish() {
    if (!src_.remote()) return Status::OK();
    while (end_ < src_.size()) {
      FERRY_RETURN_IF_ERROR(Next());
      buf_.clear();
      start_ = end_;
    }
    return Status::OK();
  }

 private:
  Status Next() {
    if (end_ >= src_.size()) return Status::DataLoss("read past the end of a shard");
    const uint64_t len = std::min<uint64_t>(src_.size() - end_, kChunk);
    const size_t at = buf_.size();
    buf_.resize(at + size_t(len));
    FERRY_RETURN_IF_ERROR(src_.ReadAt(end_, size_t(len), buf_.data() + at));
    if (sink_ != nullptr) FERRY_RETURN_IF_ERROR(sink_->Append(buf_.data() + at, size_t(len)));
    end_ += len;
    return Status::OK();
  }

  static constexpr uint64_t kChunk = uint64_t{8} << 20;
  const ShardSource& src_;
  store::DiskCache::Writer* sink_;
  std::string buf_;  // bytes [start_, end_) of the object
  uint64_t start_ = 0, end_ = 0;
};

struct Shard {
  std::string path;
  std::unique_ptr<ShardSource> source;
};

// Splits a member path into WebDataset's key and extension (see "Grouping" above).
bool SplitKey(std::string_view path, std::string_view* key, std::string_view* ext);

class TarShardsDataset final : public ListedDataset {
 public:
  // Per-sample location; members of one shard. INVARIANT: size <= kMaxSampleBytes.
  struct Location {
    uint64_t offset;
    uint32_t size;
    uint32_t shard;
  };

  TarShardsDataset(std::vector<Shard> shards, internal::StringTable members, std::vector<Location> locations,
                   Listing listing, std::vector<Location> text, std::vector<Location> json, std::vector<Location> mask,
                   internal::StringTable mask_members)
      : ListedDataset(std::move(listing)),
        shards_(std::move(shards)),
        members_(std::move(members)),
        locations_(std::move(locations)),
        text_(std::move(text)),
        json_(std::move(json)),
        mask_(std::move(mask)),
        mask_members_(std::move(mask_members)) {
    FERRY_CHECK(members_.size() == static_cast<int64_t>(locations_.size()));
    FERRY_CHECK(locations_.size() == listing_.labels.size());
    FERRY_CHECK(text_.empty() || (text_.size() == locations_.size() && json_.size() == locations_.size()));
    FERRY_CHECK(mask_.empty() ||
                (mask_.size() == locations_.size() && mask_members_.size() == int64_t(locations_.size())));
  }

  int64_t size() const override { return members_.size(); }
  std::string Path(int64_t index) const override {
    FERRY_CHECK(index >= 0 && index < size());
    std::string p = shards_[locations_[static_cast<size_t>(index)].shard].path;
    p += ':';
    p += members_.Get(index);
    return p;
  }
  uint64_t SizeHint(int64_t index) const override { return locations_[size_t(index)].size; }
  std::string Key(int64_t index) const override {
    FERRY_CHECK(index >= 0 && index < size());
    std::string_view key, ext;
    const std::string_view member = members_.Get(index);
    return SplitKey(member, &key, &ext) ? std::string(key) : std::string(member);
  }
  Status ReadSample(int64_t index, std::string* out) const override {
    FERRY_CHECK(index >= 0 && index < size());
    const Location& loc = locations_[static_cast<size_t>(index)];
    out->resize(loc.size);
    const Status s = shards_[loc.shard].source->ReadAt(loc.offset, loc.size, out->data());
    if (!s.ok()) return s.WithContext(Path(index));
    return s;
  }

  bool has_annotations() const override { return !text_.empty() || !mask_.empty(); }
  Status ReadAnnotations(int64_t index, SampleAnnotations* out) const override {
    FERRY_CHECK(index >= 0 && index < size());
    *out = SampleAnnotations();
    auto read = [&](const Location& loc, std::string* dst) -> Status {
      dst->resize(loc.size);
      if (loc.size == 0) return Status::OK();
      const Status s = shards_[loc.shard].source->ReadAt(loc.offset, loc.size, dst->data());
      return s.ok() ? s : s.WithContext(Path(index));
    };
    if (!mask_.empty() && mask_[size_t(index)].size > 0) {
      const Location& m = mask_[size_t(index)];
      out->semantic_path = shards_[m.shard].path + ":" + std::string(mask_members_.Get(index));
      out->semantic_fill = kTarMaskFill;
      FERRY_RETURN_IF_ERROR(read(m, &out->semantic_bytes));
    }
    if (text_.empty()) return Status::OK();
    FERRY_RETURN_IF_ERROR(read(text_[size_t(index)], &out->text));
    return read(json_[size_t(index)], &out->meta);
  }

 private:
  const std::vector<Shard> shards_;
  const internal::StringTable members_;  // member path of each sample's image
  const std::vector<Location> locations_;
  const std::vector<Location> text_, json_;  // empty: no sample has a txt or json member
  const std::vector<Location> mask_;         // empty: no sample has a mask member
  const internal::StringTable mask_members_;  // each sample's mask member path ("" for none)
};

// The text of a NUL-terminated (or full-width) header field.
std::string_view Field(const char* p, size_t n) {
  size_t len = 0;
  while (len < n && p[len] != '\0') ++len;
  return std::string_view(p, len);
}

// Parses a numeric header field: octal digits with optional leading blanks and a
// NUL/space terminator, or GNU base-256 (first byte 0x80, then big-endian bytes).
std::optional<uint64_t> ParseNumber(const char* p, size_t n) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  if (u[0] & 0x80) {
    if (u[0] != 0x80) return std::nullopt;  // negative or unknown encoding
    uint64_t v = 0;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 56) return std::nullopt;
      v = (v << 8) | u[i];
    }
    return v;
  }
  size_t i = 0;
  while (i < n && (p[i] == ' ' || p[i] == '\0')) {
    if (p[i] == '\0') return 0;  // all blank: 0
    ++i;
  }
  uint64_t v = 0;
  for (; i < n && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v >> 60) return std::nullopt;
    v = v * 8 + static_cast<uint64_t>(p[i] - '0');
  }
  for (; i < n; ++i) {  // only terminators may follow
    if (p[i] != ' ' && p[i] != '\0') return std::nullopt;
  }
  return v;
}

bool ChecksumOk(const char* h) {
  const std::optional<uint64_t> stored = ParseNumber(h + 148, 8);
  if (!stored) return false;
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const bool in_field = i >= 148 && i < 156;
    unsigned_sum += in_field ? uint8_t{' '} : static_cast<uint8_t>(h[i]);
    signed_sum += in_field ? int8_t{' '} : static_cast<int8_t>(h[i]);
  }
  return *stored == unsigned_sum || static_cast<int64_t>(*stored) == signed_sum;
}

// Applies the records of a pax extended header to `path` and `size` (setting
// *has_size). Returns false if the records are malformed.
bool ParsePax(std::string_view data, std::optional<std::string>* path, uint64_t* size,
              bool* has_size) {
  while (!data.empty()) {
    if (data.front() == '\0') break;  // NUL padding after the last record
    uint64_t len = 0;
    const auto [ptr, ec] = std::from_chars(data.data(), data.data() + data.size(), len);
    if (ec != std::errc() || ptr == data.data() || len > data.size()) return false;
    const size_t digits = static_cast<size_t>(ptr - data.data());
    if (len < digits + 3 || data[digits] != ' ' || data[len - 1] != '\n') return false;
    const std::string_view record = data.substr(digits + 1, len - digits - 2);
    data.remove_prefix(len);
    const size_t eq = record.find('=');
    if (eq == std::string_view::npos) return false;
    const std::string_view key = record.substr(0, eq), value = record.substr(eq + 1);
    if (key == "path") {
      *path = std::string(value);
    } else if (key == "size") {
      uint64_t v = 0;
      const auto [p, e] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (e != std::errc() || p != value.data() + value.size()) return false;
      *size = v;
      *has_size = true;
    }
  }
  return true;
}

bool IsImageExtension(std::string_view ext) {
  static constexpr std::array<std::string_view, 9> kExtensions = {
      "jpg", "jpeg", "png", "webp", "bmp", "ppm", "pgm", "tif", "tiff"};
  for (std::string_view e : kExtensions) {
    if (ext == e) return true;
  }
  return false;
}

// WebDataset's base_plus_ext: key = directories + basename up to its first '.',
// extension = the rest. Returns false when the basename has no '.' or starts
// with one (WebDataset then ignores the member).
bool SplitKey(std::string_view path, std::string_view* key, std::string_view* ext) {
  const size_t slash = path.rfind('/');
  const size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const size_t dot = path.find('.', base);
  if (dot == std::string_view::npos || dot == base) return false;
  *key = path.substr(0, dot);
  *ext = path.substr(dot + 1);
  return true;
}

// One regular member of a shard.
struct Member {
  std::string name;
  uint64_t offset;  // of its data
  uint64_t size;
};

// Calls on_member(const Member&) -> Status for each regular member of the shard open
// as `fd`, in archive order. Errors name the shard and the header's offset.
template <typename OnMember>
Status ScanTar(SequentialReader& in, const std::string& shard, uint64_t file_size, OnMember on_member) {
  std::array<char, kBlock> h;
  std::optional<std::string> long_name, pax_path;
  // A pax size= record overrides the next member's size field. (Not an optional:
  // GCC 12 warns falsely about optional<uint64_t> here.)
  uint64_t pax_size = 0;
  bool has_pax_size = false;
  std::string meta;
  uint64_t off = 0;
  auto where = [&](uint64_t at) { return shard + ": at offset " + std::to_string(at) + ": "; };
  for (;;) {
    if (off >= file_size) {
      return Status::DataLoss(where(off) +
                              "truncated tar: the file ends before the end-of-archive block");
    }
    if (file_size - off < kBlock) {
      return Status::DataLoss(where(off) + "truncated tar: partial header block");
    }
    FERRY_RETURN_IF_ERROR(in.ReadAt(off, kBlock, h.data()));
    bool zero = true;
    for (char c : h) {
      if (c != 0) {
        zero = false;
        break;
      }
    }
    if (zero) return Status::OK();  // end of archive
    if (!ChecksumOk(h.data())) return Status::DataLoss(where(off) + "bad tar header checksum");
    std::optional<uint64_t> size = ParseNumber(h.data() + 124, 12);
    if (!size) return Status::DataLoss(where(off) + "bad size field in tar header");
    const char type = h[156];
    const bool has_data = !(type >= '1' && type <= '6');
    if (has_pax_size && type != 'x' && type != 'g') size = pax_size;
    const uint64_t data_off = off + kBlock;
    const uint64_t data_size = has_data ? *size : 0;
    if (data_size > file_size - data_off) {
      return Status::DataLoss(where(off) + "truncated tar: member '" +
                              std::string(Field(h.data(), 100)) + "' needs " +
                              std::to_string(data_size) + " bytes of data, the file has " +
                              std::to_string(file_size - data_off) + " left");
    }
    if (type == 'L' || type == 'x') {
      if (data_size > kMaxNameBytes) {
        return Status::DataLoss(where(off) + "oversized long-name/pax header (" +
                                std::to_string(data_size) + " bytes)");
      }
      meta.resize(data_size);
      FERRY_RETURN_IF_ERROR(in.ReadAt(data_off, data_size, meta.data()));
      if (type == 'L') {
        while (!meta.empty() && meta.back() == '\0') meta.pop_back();
        long_name = meta;
      } else if (!ParsePax(meta, &pax_path, &pax_size, &has_pax_size)) {
        return Status::DataLoss(where(off) + "malformed pax extended header");
      }
    } else if (type == '0' || type == '\0' || type == '7') {
      Member m;
      if (pax_path) {
        m.name = std::move(*pax_path);
      } else if (long_name) {
        m.name = std::move(*long_name);
      } else {
        const std::string_view magic(h.data() + 257, 6);
        const std::string_view prefix = Field(h.data() + 345, 155);
        if (magic == std::string_view("ustar\0", 6) && !prefix.empty()) {
          m.name = std::string(prefix) + "/";
        }
        m.name += Field(h.data(), 100);
      }
      m.offset = data_off;
      m.size = data_size;
      FERRY_RETURN_IF_ERROR(on_member(m));
    }
    // 'L', 'x' and 'K' describe the next member; anything else consumes them.
    if (type != 'L' && type != 'x' && type != 'K') {
      long_name.reset();
      pax_path.reset();
      has_pax_size = false;
    }
    off = data_off + (data_size + kBlock - 1) / kBlock * kBlock;
  }
}

// Opens a shard for reading, raising the soft limit on open files once if it is
// what stops us (one fd per shard: thousands of shards are common).
Result<internal::ScopedFd> OpenShard(const std::string& path) {
  for (int attempt = 0;; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) return internal::ScopedFd(fd);
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EMFILE && attempt == 0) {
      struct rlimit rl;
      if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (::setrlimit(RLIMIT_NOFILE, &rl) == 0) continue;
      }
    }
    Status s = internal::ErrnoToStatus(err, path);
    if (err == EMFILE) s = s.WithContext("too many shards open at once (raise `ulimit -n`)");
    return s;
  }
}

// Accumulates the members of one key (one group) while a shard is scanned.
struct Group {
  std::string key;
  std::vector<std::string> extensions;  // seen so far, lower-cased
  std::optional<Member> image;
  std::optional<Member> txt, json, mask;
  bool has_cls = false;
  std::optional<int32_t> label;
  std::string cls_problem;  // why the cls member was unusable, if it was
};

}  // namespace

Result<std::unique_ptr<Dataset>> OpenTarShards(const std::vector<std::string>& shard_paths) {
  if (shard_paths.empty()) return Status::InvalidArgument("TarShards: no shards given");
  if (shard_paths.size() > UINT32_MAX) return Status::InvalidArgument("TarShards: too many shards");

  std::vector<Shard> shards;
  shards.reserve(shard_paths.size());
  internal::StringTable members;
  std::vector<TarShardsDataset::Location> locations;
  std::vector<int32_t> labels;
  std::vector<ListingIssue> issues;
  std::vector<TarShardsDataset::Location> texts, jsons, masks;  // per sample, size 0: none
  internal::StringTable mask_members;
  bool any_text = false, any_mask = false, any_remote = false;
  Fingerprinter fp;
  fp.Add(kTarShardsKind);

  for (uint32_t s = 0; s < shard_paths.size(); ++s) {
    const std::string& path = shard_paths[s];
    std::unique_ptr<ShardSource> source;
    std::unique_ptr<store::DiskCache::Writer> keep;  // the whole shard into the worker's cache, as it streams
    if (store::IsObjectUrl(path)) {
      FERRY_ASSIGN_OR_RETURN(store::ObjectUrl url, store::ParseObjectUrl(path));
      FERRY_ASSIGN_OR_RETURN(const uint64_t size, store::ObjectStore::Get().Size(url));
      auto shard = std::make_unique<ObjectShard>(std::move(url), size);
      if (store::DiskCache* cache = store::ObjectStore::Get().mutable_cache()) {
        std::unique_ptr<store::DiskCache::Span> local = cache->OpenSpan(shard->CacheKey());
        if (local != nullptr && local->size == size) {
          shard->SetLocal(std::move(local));  // listed and read from the local copy
        } else {
          keep = cache->Begin(shard->CacheKey());
        }
      }
      source = std::move(shard);
    } else {
      FERRY_ASSIGN_OR_RETURN(internal::ScopedFd fd, OpenShard(path));
      struct stat st;
      if (::fstat(fd.get(), &st) != 0) return internal::ErrnoToStatus(errno, path);
      if (S_ISDIR(st.st_mode)) return Status::InvalidArgument(path + ": is a directory");
      if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
      source = std::make_unique<FileShard>(std::move(fd), uint64_t(st.st_size), path);
    }
    SequentialReader in(*source, keep.get());
    const std::string_view shard_name = internal::Basename(path);

    std::vector<Group> groups;  // in order of first appearance
    std::unordered_map<std::string, size_t> group_of_key;
    std::string cls_text;
    auto finish = [&](const Group& g) {
      const std::string where = path + ":" + g.key;
      const bool text_only = !g.has_cls && (g.txt || g.json || g.mask);
      if (!g.image) {
        issues.push_back({where, "no image member"});
      } else if (!g.label && !text_only) {
        issues.push_back({where, g.cls_problem.empty() ? "no cls member (nor txt, json or mask)" : g.cls_problem});
      } else if (g.image->size > internal::kMaxSampleBytes) {
        issues.push_back({path + ":" + g.image->name,
                          "image member too large (" + std::to_string(g.image->size) + " bytes)"});
      } else if ((g.txt && g.txt->size > kMaxTextBytes) || (g.json && g.json->size > kMaxTextBytes)) {
        issues.push_back({where, "txt or json member larger than 1 MiB"});
      } else if (g.mask && g.mask->size > internal::kMaxSampleBytes) {
        issues.push_back({path + ":" + g.mask->name,
                          "mask member too large (" + std::to_string(g.mask->size) + " bytes)"});
      } else {
        members.Append(g.image->name);
        locations.push_back({g.image->offset, static_cast<uint32_t>(g.image->size), s});
        const int32_t label = g.label ? *g.label : 0;
        labels.push_back(label);
        fp.Add(shard_name);
        fp.Add(g.image->name);
        fp.AddU64(static_cast<uint64_t>(label));
        texts.push_back(g.txt ? TarShardsDataset::Location{g.txt->offset, uint32_t(g.txt->size), s}
                              : TarShardsDataset::Location{0, 0, s});
        jsons.push_back(g.json ? TarShardsDataset::Location{g.json->offset, uint32_t(g.json->size), s}
                               : TarShardsDataset::Location{0, 0, s});
        if (g.txt) fp.Add(g.txt->name);
        if (g.json) fp.Add(g.json->name);
        masks.push_back(g.mask ? TarShardsDataset::Location{g.mask->offset, uint32_t(g.mask->size), s}
                               : TarShardsDataset::Location{0, 0, s});
        mask_members.Append(g.mask ? std::string_view(g.mask->name) : std::string_view());
        if (g.mask) fp.Add(g.mask->name);
        any_text = any_text || g.txt || g.json;
        any_mask = any_mask || g.mask;
      }
    };
    auto on_member = [&](const Member& m) -> Status {
      std::string_view key, ext_raw;
      if (!SplitKey(m.name, &key, &ext_raw)) return Status::OK();
      const auto [it, inserted] = group_of_key.try_emplace(std::string(key), groups.size());
      if (inserted) {
        groups.emplace_back();
        groups.back().key = std::string(key);
      }
      Group& g = groups[it->second];
      std::string ext(ext_raw);
      for (char& c : ext) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      }
      for (const std::string& seen : g.extensions) {
        if (seen == ext) {
          issues.push_back({path + ":" + m.name, "duplicate member for key; ignored"});
          return Status::OK();
        }
      }
      g.extensions.push_back(ext);
      if (IsImageExtension(ext)) {
        if (!g.image) g.image = m;
      } else if (ext == "txt") {
        g.txt = m;
      } else if (ext == "json") {
        g.json = m;
      } else if (ext == "seg.png" || ext == "mask.png") {
        if (g.mask) {
          issues.push_back({path + ":" + m.name, "a second mask member for key; ignored"});
        } else {
          g.mask = m;
        }
      } else if (ext == "cls") {
        g.has_cls = true;
        if (m.size > kMaxClsBytes) {
          g.cls_problem = "cls member too large (" + std::to_string(m.size) + " bytes)";
          return Status::OK();
        }
        cls_text.resize(m.size);
        FERRY_RETURN_IF_ERROR(in.ReadAt(m.offset, m.size, cls_text.data()));
        std::string_view t(cls_text);
        while (!t.empty() &&
               (t.front() == ' ' || t.front() == '\t' || t.front() == '\n' || t.front() == '\r')) {
          t.remove_prefix(1);
        }
        while (!t.empty() &&
               (t.back() == ' ' || t.back() == '\t' || t.back() == '\n' || t.back() == '\r')) {
          t.remove_suffix(1);
        }
        int64_t v = -1;
        const auto [p, e] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (t.empty() || e != std::errc() || p != t.data() + t.size() || v < 0 || v > INT32_MAX) {
          g.cls_problem = "cls member is not a non-negative integer";  // its bytes are not quoted
        } else {
          g.label = static_cast<int32_t>(v);
        }
      }
      return Status::OK();
    };
    FERRY_RETURN_IF_ERROR(ScanTar(in, path, source->size(), on_member));
    if (keep != nullptr) {
      // The listing read the shard whole: kept, its members are read from the copy.
      FERRY_RETURN_IF_ERROR(in.Finish());
      auto* shard = static_cast<ObjectShard*>(source.get());
      if (keep->Commit().ok()) {
        std::unique_ptr<store::DiskCache::Span> local =
            store::ObjectStore::Get().mutable_cache()->OpenSpan(shard->CacheKey());
        if (local != nullptr && local->size == shard->size()) shard->SetLocal(std::move(local));
      }
    }
    any_remote = any_remote || source->remote();  // members read from a store: fetched ahead
    for (const Group& g : groups) finish(g);
    shards.push_back({path, std::move(source)});
  }
  if (locations.empty()) {
    return Status::NotFound("TarShards: no samples (image + cls members) in " +
                            std::to_string(shard_paths.size()) + " shard(s), first " +
                            shard_paths.front());
  }
  members.ShrinkToFit();
  locations.shrink_to_fit();
  labels.shrink_to_fit();
  if (!any_text) texts.clear(), jsons.clear();
  if (!any_mask) masks.clear(), mask_members = internal::StringTable();
  mask_members.ShrinkToFit();
  // Members are read from the shards the open checked (by fd or by URL).
  ListedDataset::Listing listing{.kind = kTarShardsKind,
                                 .labels = std::move(labels),
                                 .issues = std::move(issues),
                                 .fingerprint = fp.Finish(),
                                 .reads = SampleReads::kChecked};
  std::unique_ptr<Dataset> ds(new TarShardsDataset(std::move(shards), std::move(members), std::move(locations),
                                                   std::move(listing), std::move(texts), std::move(jsons),
                                                   std::move(masks), std::move(mask_members)));
  if (!any_remote) return ds;
  // Members of shards in object storage: each a Range request, fetched ahead.
  const store::StoreOptions& o = store::ObjectStore::Get().options();
  return WithReadAhead(std::move(ds), {o.read_ahead_requests, o.read_ahead_bytes});
}

namespace {

// If `dir` holds at least one .tar file and no subdirectories, returns its .tar
// files (full paths, sorted by name); otherwise returns an empty list.
Result<std::vector<std::string>> TarShardsInDirectory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return internal::ErrnoToStatus(errno, dir);
  std::vector<std::string> names;
  bool has_subdir = false;
  int err = 0;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      err = errno;
      break;
    }
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      struct stat st;
      is_dir = ::fstatat(::dirfd(d), e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
    }
    if (is_dir) {
      has_subdir = true;
      break;
    }
    if (internal::EndsWithIgnoreCase(name, ".tar")) names.emplace_back(name);
  }
  ::closedir(d);
  if (err != 0) return internal::ErrnoToStatus(err, dir);
  if (has_subdir) return std::vector<std::string>{};
  std::sort(names.begin(), names.end());
  for (std::string& n : names) n = internal::JoinPath(dir, n);
  return names;
}

}  // namespace

namespace internal {

Result<std::vector<std::string>> ShardsOfPattern(const std::string& spec, const DataRoots& roots) {
  std::vector<std::string> shards;
  size_t begin = 0;
  while (begin <= spec.size()) {
    size_t end = spec.find(',', begin);
    if (end == std::string::npos) end = spec.size();
    const std::string piece = spec.substr(begin, end - begin);
    begin = end + 1;
    if (piece.empty()) continue;
    FERRY_ASSIGN_OR_RETURN(std::vector<std::string> expanded, ExpandBraces(piece));
    for (std::string& shard : expanded) {
      if (!internal::EndsWithIgnoreCase(shard, ".tar"))
        return Status::InvalidArgument("dataset spec '" + spec + "': '" + shard + "' is not a .tar shard");
      FERRY_RETURN_IF_ERROR(roots.CheckAny(shard, "shard"));  // a URL: before any request
      shards.push_back(std::move(shard));
    }
  }
  if (shards.empty()) return Status::InvalidArgument("dataset spec '" + spec + "' names no shards");
  return shards;
}

}  // namespace internal

void RegisterTarShardsSource() {
  RegisterSource({
      .name = std::string(kTarShardsKind),
      .summary = "a .tar shard, a brace pattern or comma list of them, or a folder of .tar files",
      .claims =
          [](const SourceSpec& s) {
            if (s.form == SpecForm::kPattern) return true;
            if (!s.is_dir) return internal::EndsWithIgnoreCase(s.text, ".tar");
            const Result<std::vector<std::string>> shards = TarShardsInDirectory(s.text);
            return shards.ok() && !shards->empty();
          },
      .open = [](const SourceSpec& s, const DataRoots& roots) -> Result<std::unique_ptr<Dataset>> {
        std::vector<std::string> shards;
        if (s.form == SpecForm::kPattern) {
          FERRY_ASSIGN_OR_RETURN(shards, internal::ShardsOfPattern(s.text, roots));
        } else if (s.is_dir) {
          FERRY_ASSIGN_OR_RETURN(shards, TarShardsInDirectory(s.text));
          for (const std::string& shard : shards) FERRY_RETURN_IF_ERROR(roots.Check(shard, "shard"));
        } else {
          shards.push_back(s.text);
        }
        return OpenTarShards(shards);
      },
  });
}


}  // namespace ferry
