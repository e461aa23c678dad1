// Datasets: a listing of samples, each an encoded image plus an integer label.
//
// Glossary
//   sample index  i in [0, size()): global, stable for a given listing.
//   listing       the ordered list of (location, label) the index points into.
//   fingerprint   a 64-bit hash of the listing (locations, labels, order); two
//                 processes that compute the same fingerprint mean the same samples.
//   epoch order   a permutation of [0, size()) drawn from (seed, epoch): see
//                 permutation.h.
//
// Every source shares this interface; data/source.h lists them and says which spec
// opens which (a source registers itself by the formats, URL schemes and path shapes
// it opens). Among them:
//   ImageFolder  root/<class>/<file>: classes sorted, files sorted within a class,
//                only image extensions, exactly as torchvision.datasets.ImageFolder.
//   FileList     a TSV file of `path<TAB>label` lines (relative paths are taken
//                relative to the TSV's folder).
//   TarShards    WebDataset-style .tar shards: `key.jpg|jpeg|png|...` plus `key.cls`;
//                image members are read in place (pread at their offset).
//   COCO, segmentation layouts, and each of these in object storage.
// Sources derive from ListedDataset (data/dataset_bases.h), wrappers from
// ForwardingDataset.
//
// Thread safety: after Open*(), a Dataset is immutable and ReadSample() may be called
// concurrently from any number of threads.
#ifndef FERRY_DATA_DATASET_H_
#define FERRY_DATA_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/annotations.h"
#include "ferry/status.h"

namespace ferry {

class DataRoots;

// A problem found while listing a dataset (e.g. a directory named like an image).
// It is reported like a sample that failed to decode, but it has no sample index.
struct ListingIssue {
  std::string path;
  std::string reason;
};

// How a dataset's samples are read, for the checks --data-root makes (data_roots.h).
enum class SampleReads {
  kByPath,    // each sample is a file opened by its own path (which may be a symlink
              // leading out): a confined read checks the path again each time
  kChecked,   // every byte comes from what was checked when the dataset was opened
              // (shard files, object URLs): nothing more to check per read
  kNone,      // no bytes are read (synthetic samples, a user-code dataset's indices)
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  virtual int32_t Label(int64_t index) const = 0;
  // A human-readable location for messages: a file path, or "shard.tar:member".
  virtual std::string Path(int64_t index) const = 0;
  // The sample's key (the "key" target): WebDataset's for shard members (the member
  // path up to the first '.' of its basename); for a file, its path without its
  // extension.
  virtual std::string Key(int64_t index) const {
    std::string p = Path(index);
    const size_t slash = p.rfind('/');
    const size_t dot = p.rfind('.');
    if (dot != std::string::npos && (slash == std::string::npos || dot > slash + 1)) p.resize(dot);
    return p;
  }
  // Reads the encoded bytes of sample `index` into *out (resized to fit; its capacity
  // is reused across calls, which is why this is an output parameter).
  // Errors: NotFound / PermissionDenied / DataLoss / InvalidArgument, with the reason.
  virtual Status ReadSample(int64_t index, std::string* out) const = 0;

  // Class names in label order (ImageFolder); empty when labels have no names.
  virtual const std::vector<std::string>& classes() const = 0;
  // Fingerprint of the listing: a stable hash of locations, labels and order.
  virtual uint64_t fingerprint() const = 0;
  // Problems found while listing (never fatal).
  virtual const std::vector<ListingIssue>& listing_issues() const = 0;
  // The source's registered name ("image_folder", "file_list", "tar_shards", "coco",
  // "segmentation"; "synthetic", "python"): for messages and fingerprints. Code that
  // must act on what a dataset is asks the traits below, or the job's batch source
  // (pipeline/prepared_job.h), never this string.
  virtual std::string_view kind() const = 0;
  virtual SampleReads sample_reads() const { return SampleReads::kByPath; }
  // Its samples' locations were written in a file's contents (a list's entries, COCO's
  // file_names), not found by walking a folder: a confined open checks each one before
  // the job is taken.
  virtual bool entries_from_contents() const { return false; }

  // A hint: these samples will be read soon, in this order (the producer calls it as it
  // plans each batch). Datasets whose reads wait on a network fetch them ahead
  // (data/read_ahead.h); the others ignore it.
  virtual void Prefetch(const std::vector<int64_t>& indices) const {}
  // The sample's size in bytes when the listing knows it (objects), else 0.
  virtual uint64_t SizeHint(int64_t index) const { return 0; }

  // A mixture's indices are draw ids (data/mixture.h); every other dataset's are its
  // samples'. The sample an index names, as a batch reports it: the index itself but
  // for a mixture.
  virtual int64_t SampleIndex(int64_t index) const { return index; }
  // Which of a mixture's sources an index comes from (its pipeline runs on it); 0 for
  // any other dataset.
  virtual int Part(int64_t index) const { return 0; }
  // A mixture's sources' sizes (listing facts), in its order; empty for any other.
  virtual std::vector<int64_t> part_sizes() const { return {}; }

  // Sources whose samples carry annotations (COCO): true, and ReadAnnotations fills
  // `out` for sample `index` (data/annotations.h). Classification sources: false.
  virtual bool has_annotations() const { return false; }
  virtual Status ReadAnnotations(int64_t index, SampleAnnotations* out) const {
    return Status::Unimplemented("this dataset has no annotations");
  }
};

// Lower-case extensions torchvision.datasets.folder.IMG_EXTENSIONS accepts.
bool HasImageExtension(std::string_view filename);

Result<std::unique_ptr<Dataset>> OpenImageFolder(const std::string& root);
Result<std::unique_ptr<Dataset>> OpenFileList(const std::string& tsv_path);
// `shards`: paths of .tar files, in shard order.
Result<std::unique_ptr<Dataset>> OpenTarShards(const std::vector<std::string>& shards);

// COCO (data/coco.cc): an instances JSON and the folder its file_names are in.
struct CocoOptions {
  bool remove_images_without_annotations = false;
  bool skip_crowd = false;
  bool contiguous_labels = false;
};
Result<std::unique_ptr<Dataset>> OpenCoco(const std::string& annotations, const std::string& images,
                                          const CocoOptions& options = {});

// WebDataset's brace notation: "shard-{000..127}.tar" -> shard-000.tar ... shard-127.tar
// (zero-padded to the first number's width; several braces multiply). A pattern with
// no brace is itself. InvalidArgument for a malformed range or over 1,000,000 names.
Result<std::vector<std::string>> ExpandBraces(const std::string& pattern);

// Segmentation (data/segmentation.cc): images and PNG masks paired by stem.
struct SegmentationOptions {
  std::string images, masks;
  std::string list;          // a file of stems (VOC's ImageSets/Segmentation/train.txt), or "": every image
  std::string image_suffix;  // Cityscapes: "_leftImg8bit"
  std::string mask_suffix;   // Cityscapes: "_gtFine_labelIds"
  uint8_t ignore_index = 255;
};
Result<std::unique_ptr<Dataset>> OpenSegmentation(const SegmentationOptions& options, const DataRoots& roots);

// Opens `spec` by its shape:
//   a brace pattern of .tar shards ("shard-{000..127}.tar", ExpandBraces) -> TarShards
//   a JSON object (starts with '{') -> the source its "format" names:
//     {"format": "coco", "annotations": FILE, "images": DIR, and CocoOptions' names}
//     {"format": "segmentation", "images": DIR, "masks": DIR, and SegmentationOptions'}
//   a .tsv or .txt file           -> FileList
//   a .tar file, or a comma-separated list of .tar files, or a directory holding
//   .tar files and no subdirectories -> TarShards
//   any other directory           -> ImageFolder
Result<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec);
// The same, reading only inside `roots` (data/data_roots.h): every path the spec
// names, a folder's shards and a list's entries are checked before anything is read
// (PermissionDenied naming the path), and each sample's path again when it is read.
Result<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec, const DataRoots& roots);

// `n` samples with no bytes behind them (kind() "synthetic"; label i % 1000): for
// benchmarks of everything but decoding. A BatchProducer fills their rows itself.
std::unique_ptr<Dataset> MakeSyntheticDataset(int64_t n);

// A user-code job's `n` samples (kind() "python"): indices with nothing to read; a
// BatchProducer with SetUserCode has its Python code make them.
std::unique_ptr<Dataset> MakeUserCodeDataset(int64_t n, uint64_t fingerprint);

}  // namespace ferry

#endif  // FERRY_DATA_DATASET_H_
