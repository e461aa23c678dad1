// Where a process that serves jobs may read: the folders given with --data-root.
//
// A job names paths (a dataset's folder, a file list, shards, and the paths a list
// holds), and the peer that sends the job is not the operator of the machine that
// reads them. With roots set, a path is read only if it resolves, after every symlink
// (realpath), inside one of them; with none, any readable path is (and the daemons say
// so once at start). Checked where a path enters (OpenDataset) and again before each
// sample is read (a folder's entry, or a list's, may be a symlink out).
//
// A path outside every root is PermissionDenied naming the path and the rule, whether
// or not it exists (a missing path outside is not NotFound: no peer learns what exists
// outside the roots). Errors never quote a file's contents.
//
// Not covered: a local user who can write inside a root and swaps a checked path for
// a symlink between the check and the open (the threat here is the remote peer, who
// cannot create files); SECURITY.md says so.
#ifndef FERRY_DATA_DATA_ROOTS_H_
#define FERRY_DATA_DATA_ROOTS_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"

namespace ferry {

class Dataset;

// Object storage (store/object_store.h): a root may also be a bucket or a URL prefix
// (s3://bucket/, s3://bucket/train/, https://host/data/). A daemon (Make) reads a URL
// only inside one of its URL roots: with none, it reads no URL at all, so that a job
// cannot make it fetch whatever it names (a cloud's metadata service above all). A URL
// whose path holds a "." or ".." segment, or whose host is link-local (169.254.0.0/16,
// fe80::/10, fd00:ec2::254) or a metadata service's name, is refused always, roots or
// not. The trainer's own process (DataRoots()) reads any other URL. Checked before any
// request is sent.
class DataRoots {
 public:
  DataRoots() = default;  // no roots: every readable path, every URL (in-process)
  // Each folder resolved (realpath) once; InvalidArgument if one is not a folder. URLs
  // are kept as prefixes (parsed: InvalidArgument if malformed).
  static Result<DataRoots> Make(const std::vector<std::string>& dirs);

  bool confined() const { return !roots_.empty() || !url_roots_.empty(); }
  const std::vector<std::string>& roots() const { return roots_; }
  const std::vector<std::string>& url_roots() const { return url_roots_; }
  // The roots for a daemon's start-up line: "/data, s3://bucket/train".
  std::string Describe() const;
  // OK if `url` may be read (see above); PermissionDenied naming it and the rule if not.
  Status CheckUrl(std::string_view url, std::string_view what) const;
  // CheckUrl for a URL, Check for a path.
  Status CheckAny(std::string_view path_or_url, std::string_view what) const;
  // CheckUrl for a URL, CheckLexically for a path.
  Status CheckAnyLexically(std::string_view path_or_url, std::string_view what) const;
  // OK if `path` (relative paths: to the process's working folder), with its symlinks
  // resolved, is inside a root, or there are no roots. `what` names the path in the
  // error ("dataset", "file list entry").
  Status Check(std::string_view path, std::string_view what) const;
  // The same without touching the file system: `path`, made absolute and normalized
  // (".." folded), is inside a root. For a list's entries, millions of them, at open;
  // Check() runs again when each is read.
  Status CheckLexically(std::string_view path, std::string_view what) const;

 private:
  bool Inside(const std::string& resolved) const;
  Status Outside(std::string_view path, std::string_view what, const std::string& resolved) const;
  std::vector<std::string> roots_;
  std::vector<std::string> url_roots_;  // "s3://bucket/prefix", "https://host/path"
  bool daemon_ = false;                 // made by Make(): URLs need a URL root
};

// `dataset` (opened from `roots`-checked paths), its samples' paths checked again
// before each read: a sample whose path resolves outside the roots is a bad sample
// (PermissionDenied, by path), reported like an undecodable one. Unconfined roots, or a
// dataset whose samples are members of open shards, are returned as they are.
std::unique_ptr<Dataset> Confine(std::unique_ptr<Dataset> dataset, const DataRoots& roots);

}  // namespace ferry

#endif  // FERRY_DATA_DATA_ROOTS_H_
