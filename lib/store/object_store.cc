// ObjectStore (store/object_store.h): libcurl for the requests and their SigV4
// signatures, expat for the listings.
#include "store/object_store.h"

#include <curl/curl.h>
#include <expat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <set>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "core/log.h"
#include "core/strings.h"
#include "store/disk_cache.h"

namespace ferry::store {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

std::string Trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t' || s[a] == '\r' || s[a] == '\n')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t' || s[b - 1] == '\r' || s[b - 1] == '\n')) --b;
  return std::string(s.substr(a, b - a));
}

bool Unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.' || c == '~';
}

std::string Encode(std::string_view s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (Unreserved(c) || (keep_slash && c == '/')) {
      out += char(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// S3's bucket naming rules (3-63 of [a-z0-9.-], starting and ending with a letter or
// digit); older buckets may hold '_' or capitals, which path-style stores accept.
bool ValidBucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) return false;
  return std::isalnum(static_cast<unsigned char>(b.front())) && std::isalnum(static_cast<unsigned char>(b.back()));
}

// --- expat: the few elements of a ListObjectsV2 page or an error body --------------

struct XmlState {
  std::vector<std::string> path;  // element names from the root
  std::string text;
  ListPage page;
  ObjectInfo current;
  std::string code, message;
  bool bad_size = false;
};

void XMLCALL OnStart(void* data, const XML_Char* name, const XML_Char**) {
  auto* st = static_cast<XmlState*>(data);
  st->path.emplace_back(name);
  st->text.clear();
}

void XMLCALL OnText(void* data, const XML_Char* s, int len) {
  auto* st = static_cast<XmlState*>(data);
  if (st->text.size() < 65536) st->text.append(s, size_t(len));
}

void XMLCALL OnEnd(void* data, const XML_Char* name) {
  auto* st = static_cast<XmlState*>(data);
  const std::string_view n(name);
  const std::string_view parent = st->path.size() >= 2 ? std::string_view(st->path[st->path.size() - 2]) : "";
  if (parent == "Contents" && n == "Key") {
    st->current.key = st->text;
  } else if (parent == "Contents" && n == "Size") {
    char* end = nullptr;
    st->current.size = std::strtoull(st->text.c_str(), &end, 10);
    if (st->text.empty() || end == nullptr || *end != '\0') st->bad_size = true;
  } else if (n == "Contents") {
    st->page.objects.push_back(std::move(st->current));
    st->current = {};
  } else if (parent == "ListBucketResult" && n == "IsTruncated") {
    st->page.truncated = st->text == "true";
  } else if (parent == "ListBucketResult" && n == "NextContinuationToken") {
    st->page.next_token = st->text;
  } else if (parent == "Error" && n == "Code") {
    st->code = st->text;
  } else if (parent == "Error" && n == "Message") {
    st->message = st->text;
  }
  st->path.pop_back();
  st->text.clear();
}

Status ParseXml(std::string_view xml, XmlState* st) {
  XML_Parser p = XML_ParserCreate(nullptr);
  if (p == nullptr) return Status::ResourceExhausted("cannot make an XML parser");
  XML_SetUserData(p, st);
  XML_SetElementHandler(p, OnStart, OnEnd);
  XML_SetCharacterDataHandler(p, OnText);
  const bool ok = XML_Parse(p, xml.data(), int(xml.size()), 1) == XML_STATUS_OK;
  std::string why = ok ? "" : XML_ErrorString(XML_GetErrorCode(p));
  const auto line = XML_GetCurrentLineNumber(p);
  XML_ParserFree(p);
  if (!ok) return Status::DataLoss("not well-formed XML (" + why + " at line " + std::to_string(line) + ")");
  return Status::OK();
}

// --- curl -------------------------------------------------------------------------

struct CurlHandle {
  CURL* h = curl_easy_init();
  ~CurlHandle() {
    if (h != nullptr) curl_easy_cleanup(h);
  }
};

CURL* ThreadHandle() {
  thread_local CurlHandle handle;
  return handle.h;
}

// What a request's body goes to: the data (2xx), or the error body (kept short).
struct Sink {
  CURL* curl = nullptr;
  std::string* out = nullptr;  // appended to
  uint64_t max_bytes = 0;      // of *out
  uint64_t range_from = 0;     // the first byte a Range asked for (0: none, or from the start)
  uint64_t skip = 0;           // leading bytes to drop: a 200 (the whole object) where a range was asked
  bool skip_decided = false;
  bool too_big = false;
  long status = 0;
  std::string error_body;
  uint64_t received = 0;  // data bytes appended by this request
  uint64_t want = UINT64_MAX;  // bytes this request asked for
};

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const size_t len = size * n;
  if (s->status == 0) curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &s->status);
  if (s->status < 200 || s->status >= 300) {
    if (s->error_body.size() < 65536) s->error_body.append(data, std::min(len, 65536 - s->error_body.size()));
    return len;
  }
  if (!s->skip_decided) {
    s->skip_decided = true;
    if (s->status == 200) s->skip = s->range_from;
  }
  size_t from = 0;
  if (s->skip > 0) {
    from = size_t(std::min<uint64_t>(s->skip, len));
    s->skip -= from;
  }
  if (s->out == nullptr) return len;
  if (s->out->size() + std::min<uint64_t>(len - from, s->want - s->received) > s->max_bytes) {
    s->too_big = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  // A server that ignored a bounded range sends more than asked: keep what was asked.
  const size_t keep = size_t(std::min<uint64_t>(len - from, s->want - s->received));
  s->out->append(data + from, keep);
  s->received += keep;
  return len;
}

bool Retryable(long status, const std::string& code) {
  return status == 500 || status == 502 || status == 503 || status == 504 || status == 429 || code == "SlowDown" ||
         code == "RequestTimeout" || code == "InternalError";
}

std::string Reason(long status, const std::string& body) {
  std::string r = "HTTP " + std::to_string(status);
  const std::string e = ErrorOfBody(body);
  if (!e.empty()) r += " " + e;
  return r;
}

Status StatusOf(long status, const std::string& body, const std::string& url) {
  const std::string why = url + ": " + Reason(status, body);
  if (status == 404) return Status::NotFound(why);
  if (status == 401 || status == 403) return Status::PermissionDenied(why);
  if (status == 416) return Status::OutOfRange(why);
  if (status >= 400 && status < 500) return Status::InvalidArgument(why);
  return Status::Unavailable(why);
}

}  // namespace

// --- URLs ---------------------------------------------------------------------------

std::string EncodePath(std::string_view key) { return Encode(key, true); }
std::string EncodeQuery(std::string_view value) { return Encode(value, false); }

bool IsObjectUrl(std::string_view s) {
  return StartsWithNoCase(s, "s3://") || StartsWithNoCase(s, "http://") || StartsWithNoCase(s, "https://");
}

std::string ObjectUrl::ToString() const {
  switch (scheme) {
    case Scheme::kS3:
      return "s3://" + bucket + "/" + key;
    case Scheme::kHttp:
      return "http://" + bucket + "/" + key;
    case Scheme::kHttps:
      return "https://" + bucket + "/" + key;
  }
  return "";
}

namespace {
// "'<url>': <why>" (appended piecewise: GCC 12 warns falsely on chains of operator+).
Status BadUrl(std::string_view url, std::string_view why) {
  std::string m = "'";
  m.append(url.substr(0, 300));
  m += "': ";
  m.append(why);
  return Status::InvalidArgument(std::move(m));
}
}  // namespace

Result<ObjectUrl> ParseObjectUrl(std::string_view s) {
  for (unsigned char c : s)
    if (c <= ' ' || c == 0x7f)
      return BadUrl(s, "a URL holds no spaces or controls");
  ObjectUrl u;
  std::string_view rest;
  if (StartsWithNoCase(s, "s3://")) {
    u.scheme = ObjectUrl::Scheme::kS3;
    rest = s.substr(5);
  } else if (StartsWithNoCase(s, "https://")) {
    u.scheme = ObjectUrl::Scheme::kHttps;
    rest = s.substr(8);
  } else if (StartsWithNoCase(s, "http://")) {
    u.scheme = ObjectUrl::Scheme::kHttp;
    rest = s.substr(7);
  } else {
    return BadUrl(s, "not an s3://, http:// or https:// URL");
  }
  const size_t slash = rest.find('/');
  u.bucket = std::string(rest.substr(0, slash));
  u.key = slash == std::string_view::npos ? "" : std::string(rest.substr(slash + 1));
  if (u.bucket.empty()) return BadUrl(s, "no bucket or host");
  if (u.is_s3() && !ValidBucket(u.bucket))
    return BadUrl(s, "not a valid bucket name (3 to 63 letters, digits, '.', '-')");
  if (!u.is_s3()) {
    if (u.bucket.find('@') != std::string::npos)
      // Not quoted: the part before '@' may be a password.
      return Status::InvalidArgument("a URL with credentials in it (user:password@host) is not accepted: give "
                                     "them as the environment's (README, \"Data in object storage\")");
    std::transform(u.bucket.begin(), u.bucket.end(), u.bucket.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
  }
  return u;
}

// --- credentials and XML ---------------------------------------------------------------

Result<Credentials> ParseCredentialsFile(std::string_view text, std::string_view profile) {
  Credentials c;
  bool in_profile = false, found = false;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      std::string name = Trim(std::string_view(t).substr(1, t.size() - 2));
      if (name.rfind("profile ", 0) == 0) name = Trim(std::string_view(name).substr(8));  // the config file's form
      in_profile = name == profile;
      found = found || in_profile;
      continue;
    }
    if (!in_profile) continue;
    const size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = Trim(std::string_view(t).substr(0, eq)), v = Trim(std::string_view(t).substr(eq + 1));
    if (k == "aws_access_key_id") c.access_key = v;
    if (k == "aws_secret_access_key") c.secret_key = v;
    if (k == "aws_session_token") c.session_token = v;
  }
  if (!found) return Status::NotFound("no profile [" + std::string(profile) + "]");
  return c;
}

Result<ListPage> ParseListPage(std::string_view xml) {
  XmlState st;
  FERRY_RETURN_IF_ERROR(ParseXml(xml, &st).WithContext("a listing"));
  if (!st.code.empty()) return Status::Unavailable("the store answered " + st.code + ": " + st.message);
  if (st.bad_size) return Status::DataLoss("a listing: an object's <Size> is not a number");
  if (st.page.truncated && st.page.next_token.empty())
    return Status::DataLoss("a listing: truncated, but no NextContinuationToken");
  return std::move(st.page);
}

std::string ErrorOfBody(std::string_view xml) {
  if (xml.empty()) return "";
  XmlState st;
  if (!ParseXml(xml, &st).ok() || st.code.empty()) return "";
  return st.message.empty() ? st.code : st.code + ": " + st.message;
}

// --- the store ------------------------------------------------------------------------

class ObjectStore::Impl {
 public:
  StoreOptions opts;
  std::string endpoint;  // "" = AWS
  std::string region;
  Credentials creds;
  CredentialInfo info;
  std::unique_ptr<DiskCache> cache;
  std::mutex inflight_mu;  // keys being fetched into the cache (Read)
  std::condition_variable inflight_cv;
  std::set<std::string> inflight;
  std::mutex jitter_mu;
  std::mt19937_64 jitter{std::random_device{}()};

  // The request URL of `u`, with `query` (already encoded and sorted) appended.
  std::string UrlOf(const ObjectUrl& u, const std::string& query) const {
    std::string url;
    if (u.is_s3()) {
      if (!endpoint.empty()) {
        url = endpoint + "/" + u.bucket + "/" + EncodePath(u.key);
      } else if (u.bucket.find('.') != std::string::npos) {
        url = "https://s3." + region + ".amazonaws.com/" + u.bucket + "/" + EncodePath(u.key);
      } else {
        url = "https://" + u.bucket + ".s3." + region + ".amazonaws.com/" + EncodePath(u.key);
      }
    } else {
      // The path as the URL gave it (a server's own encoding is kept).
      url = (u.scheme == ObjectUrl::Scheme::kHttps ? "https://" : "http://") + u.bucket + "/" + u.key;
    }
    if (!query.empty()) url += "?" + query;
    return url;
  }

  double Backoff(int attempt) {
    const double cap = std::min(opts.backoff_max_s, opts.backoff_initial_s * double(uint64_t{1} << std::min(attempt, 20)));
    std::lock_guard<std::mutex> lock(jitter_mu);
    return std::uniform_real_distribution<double>(0, cap)(jitter);  // full jitter
  }

  // One request, retried: `sink->out` (when set) collects the body from `offset`;
  // `end` (inclusive) bounds the range, UINT64_MAX for none; `head` sends HEAD.
  Status Do(const ObjectUrl& u, const std::string& query, uint64_t offset, uint64_t end, std::string* out,
            uint64_t max_bytes, bool head, uint64_t* content_length, StoreCounters* counters) {
    const std::string url = UrlOf(u, query);
    const std::string shown = u.ToString() + (query.empty() ? "" : "?" + query);
    const size_t base = out != nullptr ? out->size() : 0;
    Status last;
    for (int attempt = 0; attempt < opts.max_attempts; ++attempt) {
      if (attempt > 0) {
        counters->retries.fetch_add(1, std::memory_order_relaxed);
        std::this_thread::sleep_for(std::chrono::duration<double>(Backoff(attempt - 1)));
      }
      CURL* c = ThreadHandle();
      if (c == nullptr) return Status::ResourceExhausted("cannot make a curl handle");
      curl_easy_reset(c);
      Sink sink;
      sink.curl = c;
      sink.out = out;
      sink.max_bytes = base + max_bytes;
      const uint64_t from = offset + (out != nullptr ? out->size() - base : 0);  // resume where the last try stopped
      sink.range_from = from;
      if (end != UINT64_MAX) sink.want = end + 1 - from;
      curl_easy_setopt(c, CURLOPT_URL, url.c_str());
      curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);  // a redirect would leave the checked URL
      curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
      curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, long(opts.connect_timeout_s * 1000));
      curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
      curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, std::max(1L, long(opts.stall_timeout_s)));
      curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
      curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
      if (!opts.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, opts.ca_file.c_str());
      if (head) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
      std::string range;
      if (!head && (from > 0 || end != UINT64_MAX)) {
        range = std::to_string(from) + "-" + (end == UINT64_MAX ? "" : std::to_string(end));
        curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
      }
      struct curl_slist* headers = nullptr;
      std::string sigv4, token;
      if (u.is_s3() && !info.anonymous) {
        sigv4 = "aws:amz:" + region + ":s3";
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
        curl_easy_setopt(c, CURLOPT_USERNAME, creds.access_key.c_str());
        curl_easy_setopt(c, CURLOPT_PASSWORD, creds.secret_key.c_str());
        // The payload's hash (of no bytes): S3 wants it in the signed headers.
        headers = curl_slist_append(
            headers, "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        if (!creds.session_token.empty()) {
          token = "x-amz-security-token: " + creds.session_token;
          headers = curl_slist_append(headers, token.c_str());
        }
      }
      if (headers != nullptr) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
      counters->requests.fetch_add(1, std::memory_order_relaxed);
      const CURLcode rc = curl_easy_perform(c);
      if (headers != nullptr) curl_slist_free_all(headers);
      curl_off_t first_byte_us = 0;
      curl_easy_getinfo(c, CURLINFO_STARTTRANSFER_TIME_T, &first_byte_us);
      counters->latency_us.fetch_add(uint64_t(std::max<curl_off_t>(0, first_byte_us)), std::memory_order_relaxed);
      counters->bytes.fetch_add(sink.received, std::memory_order_relaxed);
      long status = 0;
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
      if (sink.too_big) {
        counters->failures.fetch_add(1, std::memory_order_relaxed);
        return Status::InvalidArgument(shown + ": larger than the " + std::to_string(max_bytes) +
                                       " bytes a sample may have");
      }
      if (rc != CURLE_OK) {
        // Transport: refused, reset, cut short, stalled. The bytes received so far stay
        // in *out; the next try asks for the rest.
        last = Status::Unavailable(shown + ": " + curl_easy_strerror(rc));
        continue;
      }
      if (status >= 200 && status < 300) {
        if (content_length != nullptr) {
          curl_off_t len = -1;
          curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
          if (len < 0) return Status::Unavailable(shown + ": the server gave no Content-Length");
          *content_length = uint64_t(len);
        }
        return Status::OK();
      }
      const std::string body = sink.error_body;
      std::string code;
      {
        XmlState st;
        if (ParseXml(body, &st).ok()) code = st.code;
      }
      last = StatusOf(status, body, shown);
      if (!Retryable(status, code)) break;
    }
    counters->failures.fetch_add(1, std::memory_order_relaxed);
    if (last.code() == StatusCode::kUnavailable)
      return Status::Unavailable(last.message() + " (after " + std::to_string(opts.max_attempts) + " tries)");
    return last;
  }
};

namespace {
std::mutex g_mu;
StoreOptions* g_options = nullptr;  // from Configure, before the first Get
std::atomic<const ObjectStore*> g_made{nullptr};
}  // namespace

const ObjectStore* ObjectStore::IfUsed() { return g_made.load(std::memory_order_acquire); }

Status ObjectStore::Configure(const StoreOptions& options) {
  if (!options.endpoint.empty() && !StartsWithNoCase(options.endpoint, "http://") &&
      !StartsWithNoCase(options.endpoint, "https://"))
    return Status::InvalidArgument("--s3-endpoint '" + options.endpoint + "': give an http:// or https:// URL");
  if (!options.cache_dir.empty()) {
    FERRY_RETURN_IF_ERROR(DiskCache::Open(options.cache_dir, options.cache_bytes).status());  // fails at start
  }
  std::lock_guard<std::mutex> lock(g_mu);
  delete g_options;
  g_options = new StoreOptions(options);
  return Status::OK();
}

ObjectStore& ObjectStore::Get() {
  static ObjectStore* store = [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    auto impl = std::make_unique<Impl>();
    bool configured = false;  // by a daemon's flags: they win over the environment
    {
      std::lock_guard<std::mutex> lock(g_mu);
      if (g_options != nullptr) impl->opts = *g_options;
      configured = g_options != nullptr;
    }
    std::string endpoint = impl->opts.endpoint;
    if (endpoint.empty()) endpoint = Env("AWS_ENDPOINT_URL_S3");
    if (endpoint.empty()) endpoint = Env("AWS_ENDPOINT_URL");
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    impl->endpoint = endpoint;
    if (impl->opts.cache_dir.empty()) impl->opts.cache_dir = Env("FERRY_CACHE_DIR");
    if (!impl->opts.cache_dir.empty()) {
      if (const std::string b = Env("FERRY_CACHE_BYTES"); !b.empty() && !configured)
        impl->opts.cache_bytes = std::strtoull(b.c_str(), nullptr, 10);
      Result<std::unique_ptr<DiskCache>> cache = DiskCache::Open(impl->opts.cache_dir, impl->opts.cache_bytes);
      if (cache.ok()) {
        impl->cache = std::move(*cache);
      } else {
        LogWarn("object storage: no cache: %s", cache.status().ToString().c_str());
      }
    }
    if (impl->opts.list_page_keys == 0) impl->opts.list_page_keys = std::atoi(Env("FERRY_S3_LIST_PAGE_KEYS").c_str());
    if (impl->opts.ca_file.empty()) impl->opts.ca_file = Env("AWS_CA_BUNDLE");
    if (impl->opts.ca_file.empty()) impl->opts.ca_file = Env("CURL_CA_BUNDLE");
    impl->region = impl->opts.region;
    if (impl->region.empty()) impl->region = Env("AWS_REGION");
    if (impl->region.empty()) impl->region = Env("AWS_DEFAULT_REGION");
    if (impl->region.empty()) impl->region = "us-east-1";
    const std::string no_sign = Env("AWS_NO_SIGN_REQUEST");
    if (no_sign == "true" || no_sign == "1") {
      impl->info = {true, "anonymous ($AWS_NO_SIGN_REQUEST)"};
    } else if (!Env("AWS_ACCESS_KEY_ID").empty() && !Env("AWS_SECRET_ACCESS_KEY").empty()) {
      impl->creds = {Env("AWS_ACCESS_KEY_ID"), Env("AWS_SECRET_ACCESS_KEY"), Env("AWS_SESSION_TOKEN")};
      impl->info = {false, "environment"};
    } else {
      std::string file = Env("AWS_SHARED_CREDENTIALS_FILE");
      if (file.empty() && !Env("HOME").empty()) file = Env("HOME") + "/.aws/credentials";
      std::string profile = Env("AWS_PROFILE");
      if (profile.empty()) profile = "default";
      std::ifstream in(file);
      std::stringstream text;
      text << in.rdbuf();
      Result<Credentials> c = in ? ParseCredentialsFile(text.str(), profile) : Status::NotFound("");
      if (c.ok() && !c->access_key.empty() && !c->secret_key.empty()) {
        impl->creds = *c;
        impl->info = {false, "shared credentials file " + file + " (profile " + profile + ")"};
      } else {
        if (!Env("AWS_PROFILE").empty())
          LogWarn("object storage: profile %s not found (or incomplete) in %s: requests go unsigned",
                  profile.c_str(), file.c_str());
        impl->info = {true, "anonymous (no credentials found)"};
      }
    }
    auto* made = new ObjectStore(std::move(impl));
    g_made.store(made, std::memory_order_release);
    Log("object storage: %s, credentials: %s, cache: %s", made->endpoint_for_logs().c_str(),
        made->credentials().source.c_str(),
        made->cache() != nullptr ? (made->cache()->dir() + " (" + std::to_string(made->options().cache_bytes >> 20) +
                                    " MiB)").c_str()
                                 : "none");
    return made;
  }();
  return *store;
}

ObjectStore::ObjectStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ObjectStore::~ObjectStore() = default;

const CredentialInfo& ObjectStore::credentials() const { return impl_->info; }
const StoreOptions& ObjectStore::options() const { return impl_->opts; }
const DiskCache* ObjectStore::cache() const { return impl_->cache.get(); }
DiskCache* ObjectStore::mutable_cache() { return impl_->cache.get(); }
std::string ObjectStore::endpoint_for_logs() const {
  return impl_->endpoint.empty() ? "AWS S3 (" + impl_->region + ")" : impl_->endpoint;
}

Result<std::vector<ObjectInfo>> ObjectStore::List(const ObjectUrl& prefix) {
  if (!prefix.is_s3())
    return Status::InvalidArgument(prefix.ToString() + ": an HTTP server has no listing: name the objects (a .tsv "
                                   "list, or shards by brace pattern)");
  std::vector<ObjectInfo> all;
  std::string token;
  ObjectUrl bucket = prefix;
  bucket.key.clear();
  for (;;) {
    // The query in sorted order, encoded: what SigV4's canonical request wants.
    std::string query;
    if (!token.empty()) query += "continuation-token=" + EncodeQuery(token) + "&";
    query += "list-type=2";
    if (impl_->opts.list_page_keys > 0) query += "&max-keys=" + std::to_string(impl_->opts.list_page_keys);
    query += "&prefix=" + EncodeQuery(prefix.key);
    std::string body;
    FERRY_RETURN_IF_ERROR(impl_->Do(bucket, query, 0, UINT64_MAX, &body, uint64_t{64} << 20, false, nullptr,
                                    &counters_));
    Result<ListPage> page = ParseListPage(body);
    if (!page.ok()) return page.status().WithContext("listing " + prefix.ToString());
    for (ObjectInfo& o : page->objects) all.push_back(std::move(o));
    if (!page->truncated) break;
    token = page->next_token;
  }
  std::sort(all.begin(), all.end(), [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
  return all;
}

Status ObjectStore::Read(const ObjectUrl& url, uint64_t offset, uint64_t length, std::string* out,
                         uint64_t max_bytes) {
  out->clear();
  if (length != UINT64_MAX && length > max_bytes)
    return Status::InvalidArgument(url.ToString() + ": " + std::to_string(length) + " bytes, over the " +
                                   std::to_string(max_bytes) + " a read may have");
  if (length == 0) return Status::OK();
  std::string key;
  auto cached = [&] {
    if (!impl_->cache->Get(key, out)) return false;
    if (length == UINT64_MAX ? out->size() <= max_bytes : out->size() == length) return true;
    out->clear();
    return false;
  };
  if (impl_->cache != nullptr) {
    key = url.ToString() + "#" + std::to_string(offset) + "+" + (length == UINT64_MAX ? "all" : std::to_string(length));
    if (cached()) return Status::OK();
    // One fetch of a key at a time: a read that finds the same key being fetched (the
    // next epoch's read-ahead, another job) waits for it and takes it from the cache.
    std::unique_lock<std::mutex> lock(impl_->inflight_mu);
    bool waited = false;
    while (impl_->inflight.count(key) > 0) {
      impl_->inflight_cv.wait(lock);
      waited = true;
    }
    impl_->inflight.insert(key);
    lock.unlock();
    if (waited && cached()) {
      lock.lock();
      impl_->inflight.erase(key);
      impl_->inflight_cv.notify_all();
      return Status::OK();
    }
  }
  const uint64_t end = length == UINT64_MAX ? UINT64_MAX : offset + length - 1;
  Status s = impl_->Do(url, "", offset, end, out, max_bytes, false, nullptr, &counters_);
  if (impl_->cache != nullptr) {
    if (s.ok() && (length == UINT64_MAX || out->size() == length)) impl_->cache->Put(key, *out);
    std::lock_guard<std::mutex> lock(impl_->inflight_mu);
    impl_->inflight.erase(key);
    impl_->inflight_cv.notify_all();
  }
  FERRY_RETURN_IF_ERROR(s);
  if (length != UINT64_MAX && out->size() != length)
    return Status::DataLoss(url.ToString() + ": asked for " + std::to_string(length) + " bytes at " +
                            std::to_string(offset) + ", got " + std::to_string(out->size()) +
                            " (the object is shorter)");
  return Status::OK();
}

Result<uint64_t> ObjectStore::Size(const ObjectUrl& url) {
  uint64_t n = 0;
  FERRY_RETURN_IF_ERROR(impl_->Do(url, "", 0, UINT64_MAX, nullptr, 0, true, &n, &counters_));
  return n;
}

}  // namespace ferry::store
