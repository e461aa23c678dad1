// Dataset sources by name. Each source registers the specs it opens (a JSON
// description's format, a URL scheme, the shapes of paths and patterns it claims);
// OpenDataset (dataset.h) reads a spec once, asks the registry which source opens it,
// and then does what every source gets alike: a confined open checks the entries a
// file's contents named, and re-checks per-path reads (data_roots.h).
//
// A spec's form, decided once, before any source is asked:
//   description  a JSON object {"format": NAME, ...}: the source registered for NAME
//   url          s3://, https://, http:// (store::IsObjectUrl): the source registered
//                for the scheme (it checks every URL it will fetch against --data-root
//                before any request)
//   pattern      a brace pattern ("shard-{000..127}.tar") or, when no such path
//                exists, a comma-separated list
//   path         an existing file or folder, checked against --data-root before any
//                source looks at it
// Patterns and paths: the sources are asked in all_sources.inc's order; the first that
// claims the spec opens it (.tar shards before file lists before ImageFolder).
//
// Adding a source: one file under lib/data/ with its dataset (a ListedDataset,
// dataset_bases.h) and a registration function, and that function's line in
// all_sources.inc. (Sources live in a static library, where a registration that
// nothing references would be dropped by the linker: the ops do the same, ops/op.h.)
#ifndef FERRY_DATA_SOURCE_H_
#define FERRY_DATA_SOURCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/dataset.h"
#include "ferry/status.h"

namespace ferry {

class DataRoots;

enum class SpecForm { kDescription, kUrl, kPattern, kPath };

struct SourceSpec {
  std::string text;  // as given
  SpecForm form = SpecForm::kPath;
  std::string format;  // kDescription: its "format"
  std::string scheme;  // kUrl: "s3", "https", "http"
  bool is_dir = false;  // kPath: a folder (else a file)
  std::shared_ptr<const nlohmann::json> description;  // kDescription: the object
};

// A description's keys, read and checked like an op's parameters (ops/args.h): the
// first problem is kept and Finish() returns it, or names a key nobody asked for
// (a misspelt option would otherwise be ignored in silence).
class DescriptionArgs {
 public:
  explicit DescriptionArgs(const SourceSpec& spec);
  // A non-empty string: a path or URL. Required ones fail when absent.
  std::string Path(const char* key, bool required = true);
  // Any string, "" when absent.
  std::string Text(const char* key);
  bool Flag(const char* key, bool def);
  int64_t Int(const char* key, int64_t def, int64_t lo, int64_t hi);
  Status Finish() const;

 private:
  const nlohmann::json* Find(const char* key);
  void Fail(std::string what);

  const SourceSpec& spec_;
  std::vector<std::string> asked_;
  Status status_;
};

struct SourceKind {
  std::string name{};                  // "tar_shards", "objects": for messages
  std::string summary{};               // what it reads, for the message when no source claims a spec
  std::vector<std::string> formats{};  // descriptions it opens ({"format": "coco"})
  std::vector<std::string> schemes{};  // URLs it opens ("s3", "https")
  // Patterns and paths it opens (null: none). Called with the roots already checked.
  std::function<bool(const SourceSpec&)> claims{};
  std::function<Result<std::unique_ptr<Dataset>>(const SourceSpec&, const DataRoots&)> open{};
};

// Thread-safe. A second source under a name already taken replaces it.
void RegisterSource(SourceKind kind);
// Every source, in the order they are asked.
std::vector<std::shared_ptr<const SourceKind>> RegisteredSources();

// The spec's form and facts (parses a description; stats a path). The roots are
// consulted for paths before the path is looked at.
Result<SourceSpec> ReadSourceSpec(const std::string& spec, const DataRoots& roots);
// The source that opens `spec`, or InvalidArgument / NotFound saying why none does.
Result<std::shared_ptr<const SourceKind>> FindSource(const SourceSpec& spec);

}  // namespace ferry

#endif  // FERRY_DATA_SOURCE_H_
