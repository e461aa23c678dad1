// Objects in S3-compatible storage (s3://bucket/key) and on HTTP(S) servers, read with
// libcurl: S3 requests are signed by libcurl itself (SigV4, CURLOPT_AWS_SIGV4), S3
// listings (ListObjectsV2, paginated) are parsed with expat. No protocol code of our own
// beyond building URLs.
//
// Where a store is and who we are, as the AWS tools take them (Configure(), else the
// environment when first used):
//   endpoint     --s3-endpoint, else $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL: an
//                S3-compatible store (MinIO, Ceph, R2, GCS's interoperability endpoint),
//                addressed path-style (endpoint/bucket/key). None: AWS,
//                https://bucket.s3.<region>.amazonaws.com/key.
//   region       $AWS_REGION, $AWS_DEFAULT_REGION, else us-east-1 (the signature's scope).
//   credentials  $AWS_ACCESS_KEY_ID + $AWS_SECRET_ACCESS_KEY (+ $AWS_SESSION_TOKEN), else
//                the shared credentials file ($AWS_SHARED_CREDENTIALS_FILE, else
//                ~/.aws/credentials) at profile $AWS_PROFILE (else "default"), else
//                none: anonymous requests (a public bucket). $AWS_NO_SIGN_REQUEST=true
//                forces anonymous.
// Secrets never leave this file: errors carry the URL, the HTTP status and the store's
// <Code> and <Message>, never a key, a token or a signature (a SignatureDoesNotMatch
// body quotes the string to sign; only Code and Message are read from it).
//
// Failures: 500, 502, 503, 504, 429 and SlowDown, and transport errors (a reset, a
// timeout, a body cut short) are retried with exponential backoff and full jitter, up to
// max_attempts; a body cut short resumes from the byte it reached (a Range request).
// 404 is NotFound, 401/403 PermissionDenied, other 4xx InvalidArgument, each naming the
// URL and the store's reason; an exhausted retry is Unavailable.
//
// Thread safety: every method may be called from any number of threads (each thread
// keeps its own curl handle, so connections are reused per thread).
#ifndef FERRY_STORE_OBJECT_STORE_H_
#define FERRY_STORE_OBJECT_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/status.h"

namespace ferry::store {

class DiskCache;

// s3://bucket/key, http://host[:port]/path, https://...
struct ObjectUrl {
  enum class Scheme { kS3, kHttp, kHttps };
  Scheme scheme = Scheme::kS3;
  std::string bucket;  // S3: the bucket; HTTP(S): "host[:port]"
  std::string key;     // S3: the key (no leading '/'); HTTP(S): the path and query, without the first '/'
  std::string ToString() const;
  // The host a request goes to (HTTP(S): the URL's; S3: the endpoint's or AWS's).
  bool is_s3() const { return scheme == Scheme::kS3; }
};

// True when `s` starts with s3://, http:// or https:// (case-insensitive scheme).
bool IsObjectUrl(std::string_view s);
// InvalidArgument for an empty bucket or host, a bucket name S3 would not accept, or
// bytes a URL cannot hold (controls, spaces).
Result<ObjectUrl> ParseObjectUrl(std::string_view s);

struct StoreOptions {
  std::string endpoint;  // "" = $AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL / AWS
  std::string region;    // "" = $AWS_REGION / $AWS_DEFAULT_REGION / us-east-1
  int max_attempts = 10;
  double backoff_initial_s = 0.05;
  double backoff_max_s = 5.0;
  double connect_timeout_s = 10;
  // A request that moves no byte for this long is cut and retried (a stalled server).
  double stall_timeout_s = 30;
  // HTTPS: a CA bundle to check servers against ("" = $AWS_CA_BUNDLE, $CURL_CA_BUNDLE,
  // else the system's).
  std::string ca_file;
  // Read-ahead of a dataset's objects (data/read_ahead.h): requests in flight, and the
  // fetched bytes not yet decoded, at most.
  int read_ahead_requests = 32;
  uint64_t read_ahead_bytes = uint64_t{256} << 20;
  // Keys a listing request asks for (ListObjectsV2's max-keys): 0 = the store's page
  // (S3: 1,000). Some S3-compatible stores page smaller; $FERRY_S3_LIST_PAGE_KEYS.
  int list_page_keys = 0;
  // A local cache of fetched bytes (store/disk_cache.h): "" = none ($FERRY_CACHE_DIR).
  std::string cache_dir;
  uint64_t cache_bytes = uint64_t{10} << 30;
};

// Where the credentials came from, for logs: "environment", "shared credentials file
// (profile p)", "anonymous". Never the keys.
struct CredentialInfo {
  bool anonymous = true;
  std::string source;
};

struct ObjectInfo {
  std::string key;  // the full key
  uint64_t size = 0;
};

// Totals since start, for /metrics.
struct StoreCounters {
  std::atomic<uint64_t> requests{0};  // every request sent, retries included
  std::atomic<uint64_t> retries{0};
  std::atomic<uint64_t> failures{0};  // requests that ended in an error returned to the caller
  std::atomic<uint64_t> bytes{0};     // body bytes received
  std::atomic<uint64_t> latency_us{0};  // sum over requests: first byte (or error) time
};

class ObjectStore {
 public:
  // The process's store, made from Configure()'s options or the environment on first use.
  static ObjectStore& Get();
  // The process's store if a dataset has used it, else null (for /metrics: a worker that
  // never reads a URL shows no store).
  static const ObjectStore* IfUsed();
  // Before the first Get(): the daemon's flags. InvalidArgument for an endpoint that is
  // not an http(s) URL.
  static Status Configure(const StoreOptions& options);

  // Every object under `prefix` (S3 only; its key is a prefix, "" for the bucket), sorted
  // by key, as ListObjectsV2 pages them. NotFound for a missing bucket, PermissionDenied
  // with the store's message for a refused listing.
  Result<std::vector<ObjectInfo>> List(const ObjectUrl& prefix);
  // Bytes [offset, offset + length) of the object into *out (length UINT64_MAX: to the
  // end). An object (or range) over max_bytes is InvalidArgument before it is read.
  Status Read(const ObjectUrl& url, uint64_t offset, uint64_t length, std::string* out, uint64_t max_bytes);
  Status ReadAll(const ObjectUrl& url, std::string* out, uint64_t max_bytes) {
    return Read(url, 0, UINT64_MAX, out, max_bytes);
  }
  // The object's size (HEAD).
  Result<uint64_t> Size(const ObjectUrl& url);

  const CredentialInfo& credentials() const;
  const StoreOptions& options() const;
  const StoreCounters& counters() const { return counters_; }
  // The local cache, or null.
  const DiskCache* cache() const;
  DiskCache* mutable_cache();
  std::string endpoint_for_logs() const;

  class Impl;
  ~ObjectStore();

 private:
  explicit ObjectStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  StoreCounters counters_;
};

// The parts of the environment's credentials, for tests: parses a shared credentials
// file's text at `profile` (aws_access_key_id, aws_secret_access_key,
// aws_session_token). NotFound when the profile is not there.
struct Credentials {
  std::string access_key, secret_key, session_token;
};
Result<Credentials> ParseCredentialsFile(std::string_view text, std::string_view profile);

// A ListObjectsV2 page's keys, truncation and continuation token, or the store's error
// (<Error><Code>..</Code><Message>..</Message>): for tests of the XML parsing.
struct ListPage {
  std::vector<ObjectInfo> objects;
  bool truncated = false;
  std::string next_token;
};
Result<ListPage> ParseListPage(std::string_view xml);
// "Code: Message" of an S3 error body (only those two elements), or "" when it has none.
std::string ErrorOfBody(std::string_view xml);

// RFC 3986 percent-encoding of a key for a URL path: unreserved bytes and '/' kept.
std::string EncodePath(std::string_view key);
// For a query value: '/' encoded too.
std::string EncodeQuery(std::string_view value);

}  // namespace ferry::store

#endif  // FERRY_STORE_OBJECT_STORE_H_
