// FileList: a TSV file of `path<TAB>label` lines.
//
// Format, line by line (lines end in "\n" or "\r\n"):
//   - empty (or all-blank) lines and lines starting with '#' are skipped;
//   - otherwise the line is split at its first tab: the path is everything before it
//     (taken as written: not trimmed), the label everything after it, with blanks
//     around it trimmed; the label must be a decimal integer in [0, 2^31).
// A malformed line fails the whole open with InvalidArgument "<tsv>:<line>: why".
// Relative paths are taken relative to the folder holding the TSV; the fingerprint
// covers the paths as written, so it does not depend on where the TSV lives.
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/hash.h"
#include "data/dataset.h"
#include "data/dataset_bases.h"
#include "data/file_util.h"
#include "data/read_ahead.h"
#include "data/source.h"
#include "store/object_store.h"

namespace ferry {
namespace {

constexpr std::string_view kFileListKind = "file_list";

// A file list larger than this is certainly not one (about 50M lines).
constexpr uint64_t kMaxListBytes = uint64_t{4} << 30;

class FileListDataset final : public ListedDataset {
 public:
  FileListDataset(std::string base_dir, internal::StringTable paths, Listing listing)
      : ListedDataset(std::move(listing)), base_dir_(std::move(base_dir)), paths_(std::move(paths)) {
    FERRY_CHECK(paths_.size() == static_cast<int64_t>(listing_.labels.size()));
  }

  int64_t size() const override { return paths_.size(); }
  std::string Path(int64_t index) const override {
    return internal::JoinPath(base_dir_, paths_.Get(index));
  }
  Status ReadSample(int64_t index, std::string* out) const override {
    return internal::ReadWholeFileOrObject(Path(index), out);  // a file, or an object
  }

 private:
  const std::string base_dir_;         // the TSV's folder; "" when it is the working directory
  const internal::StringTable paths_;  // as written in the TSV
};

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<std::unique_ptr<Dataset>> OpenFileList(const std::string& tsv_path) {
  std::string text;
  FERRY_RETURN_IF_ERROR(internal::ReadWholeFileOrObject(tsv_path, &text, kMaxListBytes));

  const size_t slash = tsv_path.rfind('/');
  std::string base_dir = slash == std::string::npos ? std::string() : tsv_path.substr(0, slash + 1);

  internal::StringTable paths;
  std::vector<int32_t> labels;
  Fingerprinter fp;
  fp.Add(kFileListKind);
  const std::string_view all(text);
  int64_t line_no = 0;
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find('\n', pos);
    if (end == std::string_view::npos) end = all.size();
    std::string_view line = all.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (TrimBlanks(line).empty() || line.front() == '#') continue;

    auto bad = [&](std::string_view why) {
      return Status::InvalidArgument(tsv_path + ":" + std::to_string(line_no) + ": " +
                                     std::string(why) + " (expected 'path<TAB>label')");
    };
    const size_t tab = line.find('\t');
    if (tab == std::string_view::npos) return bad("no tab");
    const std::string_view path = line.substr(0, tab);
    if (path.empty()) return bad("empty path");
    const std::string_view label_text = TrimBlanks(line.substr(tab + 1));
    if (label_text.empty()) return bad("empty label");
    // The messages name the line, never what it holds: the file may be anything the
    // process can read, and an error goes back to the peer that named it.
    if (label_text.front() == '-') return bad("a negative label");
    int64_t label = 0;
    const auto [ptr, ec] =
        std::from_chars(label_text.data(), label_text.data() + label_text.size(), label);
    if (ec != std::errc() || ptr != label_text.data() + label_text.size()) {
      return bad("the label is not an integer");
    }
    if (label > INT32_MAX) return bad("the label is past 2^31-1");
    paths.Append(path);
    labels.push_back(static_cast<int32_t>(label));
    fp.Add(path);
    fp.AddU64(static_cast<uint64_t>(label));
  }
  if (paths.size() == 0) return Status::NotFound(tsv_path + ": the file list has no samples");
  paths.ShrinkToFit();
  labels.shrink_to_fit();
  // Each entry is read by its own path or URL, as the list wrote it.
  ListedDataset::Listing listing{.kind = kFileListKind,
                                 .labels = std::move(labels),
                                 .fingerprint = fp.Finish(),
                                 .reads = SampleReads::kByPath,
                                 .entries_from_contents = true};
  std::unique_ptr<Dataset> ds(new FileListDataset(std::move(base_dir), std::move(paths), std::move(listing)));
  if (!store::IsObjectUrl(tsv_path)) return ds;
  // A list in object storage names objects beside it: fetched ahead of decoding.
  const store::StoreOptions& o = store::ObjectStore::Get().options();
  return WithReadAhead(std::move(ds), {o.read_ahead_requests, o.read_ahead_bytes});
}

void RegisterFileListSource() {
  RegisterSource({
      .name = std::string(kFileListKind),
      .summary = "a .tsv/.txt file list",
      .claims =
          [](const SourceSpec& s) {
            return !s.is_dir &&
                   (internal::EndsWithIgnoreCase(s.text, ".tsv") || internal::EndsWithIgnoreCase(s.text, ".txt"));
          },
      .open = [](const SourceSpec& s, const DataRoots&) { return OpenFileList(s.text); },
  });
}

}  // namespace ferry
