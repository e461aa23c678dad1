#include "dispatch/journal_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "dispatch/journal_codec.h"

namespace ferry::dispatch::internal {

namespace {

// Formats 2 and 3 start with their magic and then records; format 4 adds its committed
// length (journal_file.h). Format 3 differs from 2 in what a job's `epochs` means: a
// count from its first_epoch, where formats 1 and 2 kept an end epoch (CountEpochs).
constexpr char kMagic4[] = "FERRYJ4\n";
constexpr char kMagic3[] = "FERRYJ3\n";
constexpr char kMagic2[] = "FERRYJ2\n";
constexpr size_t kMagicSize = 8;
constexpr size_t kRecordHeaderSize = 12;  // u32 length, u32 CRC of the payload, u32 CRC of those 8 bytes
// No record is larger (a snapshot's lists are cut into records of at most 2^20
// entries, journal.cc); a length past it is corruption, not a torn write.
constexpr uint32_t kMaxRecordBytes = 1u << 30;

bool StartsWith(const std::string& data, const char* magic) {
  return data.size() >= kMagicSize && data.compare(0, kMagicSize, magic, kMagicSize) == 0;
}

// Whether `data` is a proper prefix of `whole`.
bool ProperPrefixOf(const std::string& data, const std::string& whole) {
  return data.size() < whole.size() && whole.compare(0, data.size(), data) == 0;
}

uint32_t Load32(const std::string& d, size_t at) {
  uint32_t v;
  std::memcpy(&v, d.data() + at, 4);
  return v;
}

std::string At(const std::string& path, uint64_t offset) { return path + ": offset " + std::to_string(offset) + ": "; }

// A job of format 1 or 2 ran over [first_epoch, epochs): its count is the difference
// (CheckJob refused first_epoch >= epochs then, so it is > 0 when epochs was).
void CountEpochs(std::vector<Update>* updates) {
  for (Update& u : *updates) {
    if (auto* c = std::get_if<CreateJob>(&u); c != nullptr && c->spec.epochs > 0) {
      const uint64_t end = uint64_t(c->spec.epochs);
      c->spec.epochs = end > c->spec.first_epoch ? int64_t(end - c->spec.first_epoch) : 1;
    }
  }
}

// A torn tail at `pos` is allowed only at or past `guarded` (the committed length; a
// snapshot's size); before it, the same finding is DataLoss.
Status TornOrLoss(const std::string& path, uint64_t pos, uint64_t guarded, const std::string& what,
                  FileContents* out) {
  if (pos >= guarded) {
    out->torn_at = int64_t(pos);
    return Status::OK();
  }
  return Status::DataLoss(At(path, pos) + what + ", inside the " + std::to_string(guarded) +
                          " bytes the file's header says were committed (cut short or overwritten)");
}

// The records of formats 2 to 4 from `pos`; torn tails only at or past `guarded`.
Status ParseRecords(const std::string& path, const std::string& data, size_t pos, uint64_t guarded,
                    FileContents* out) {
  while (pos < data.size()) {
    const size_t left = data.size() - pos;
    if (std::all_of(data.begin() + ptrdiff_t(pos), data.end(), [](char c) { return c == 0; }))
      return TornOrLoss(path, pos, guarded, "zeros to the end of the file", out);
    if (left < kRecordHeaderSize) return TornOrLoss(path, pos, guarded, "a record header cut short", out);
    const uint32_t len = Load32(data, pos), crc = Load32(data, pos + 4), hcrc = Load32(data, pos + 8);
    if (Crc32(data.data() + pos, 8) != hcrc || len > kMaxRecordBytes)
      return Status::DataLoss(At(path, pos) + "corrupt record header (" + std::to_string(data.size()) +
                              "-byte file; the records from here on are not replayed)");
    if (left - kRecordHeaderSize < len) return TornOrLoss(path, pos, guarded, "a record cut short", out);
    const uint64_t end = pos + kRecordHeaderSize + len;
    if (pos < guarded && end > guarded)
      return Status::DataLoss(At(path, pos) + "a record runs past the committed length " + std::to_string(guarded));
    if (Crc32(data.data() + pos + kRecordHeaderSize, len) != crc) {
      if (end == data.size() && pos >= guarded) {  // the last write's blocks never reached the disk
        out->torn_at = int64_t(pos);
        return Status::OK();
      }
      return Status::DataLoss(At(path, pos) + "record checksum mismatch");
    }
    Result<Update> u = DecodeUpdate(data.substr(pos + kRecordHeaderSize, len));
    if (!u.ok()) return Status::DataLoss(At(path, pos) + "bad record: " + u.status().message());
    out->updates.push_back(std::move(*u));
    out->offsets.push_back(pos);
    pos = size_t(end);
  }
  if (guarded > data.size())
    return Status::DataLoss(At(path, data.size()) + "the file ends before the " + std::to_string(guarded) +
                            " bytes its header says were committed (cut short)");
  return Status::OK();
}

// Format 1 (u32 length, u32 CRC of the payload; read only). Its header has no checksum
// of its own: a length running past the end can only be taken for a torn write, as
// format 1 always did.
Status ParseRecordsV1(const std::string& path, const std::string& data, bool snapshot, FileContents* out) {
  size_t pos = 0;
  const uint64_t guarded = snapshot ? data.size() : 0;
  while (pos < data.size()) {
    if (std::all_of(data.begin() + ptrdiff_t(pos), data.end(), [](char c) { return c == 0; }))
      return TornOrLoss(path, pos, guarded, "zeros to the end of the file", out);
    if (data.size() - pos < 8) return TornOrLoss(path, pos, guarded, "a record header cut short", out);
    const uint32_t len = Load32(data, pos), crc = Load32(data, pos + 4);
    if (data.size() - pos - 8 < len) return TornOrLoss(path, pos, guarded, "a record cut short", out);
    if (Crc32(data.data() + pos + 8, len) != crc) {
      if (pos + 8 + len == data.size()) return TornOrLoss(path, pos, guarded, "a last record that fails its checksum", out);
      return Status::DataLoss(At(path, pos) + "record checksum mismatch");
    }
    Result<Update> u = DecodeUpdateV1(data.substr(pos + 8, len));
    if (!u.ok()) return Status::DataLoss(At(path, pos) + "bad record: " + u.status().message());
    out->updates.push_back(std::move(*u));
    out->offsets.push_back(pos);
    pos += 8 + len;
  }
  return Status::OK();
}

// Whether `data`, which starts with no known magic, positively is a file of format 1:
// its first record whole, its checksum right, its payload a format 1 update.
bool IsFormat1(const std::string& data) {
  if (data.size() < 8) return false;
  const uint32_t len = Load32(data, 0), crc = Load32(data, 4);
  if (len == 0 || data.size() - 8 < len || Crc32(data.data() + 8, len) != crc) return false;
  return DecodeUpdateV1(data.substr(8, len)).ok();
}

// The offset of the first byte of `data` that differs from the magic it is closest to.
size_t FirstBadMagicByte(const std::string& data) {
  size_t best = 0, best_same = 0;
  for (const char* m : {kMagic4, kMagic3, kMagic2}) {
    size_t same = 0, first = kMagicSize;
    for (size_t i = 0; i < kMagicSize; ++i) {
      if (i < data.size() && data[i] == m[i]) ++same;
      else if (first == kMagicSize) first = i;
    }
    if (same > best_same) best_same = same, best = first;
  }
  return std::min(best, data.size());
}

}  // namespace

// CRC-32 (IEEE 802.3, as zlib's), eight bytes a step ("slicing by 8"): a snapshot of a
// thousand jobs is tens of megabytes, and a byte a step took a fifth of its writing
// (on the deciding thread, which answers nobody meanwhile).
uint32_t Crc32(const char* p, size_t n) {
  static const std::array<std::array<uint32_t, 256>, 8> t = [] {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  for (; n >= 8; n -= 8, b += 8) {
    // Little-endian composition by hand: the same on any host.
    const uint32_t lo = (uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24) ^ c;
    const uint32_t hi = uint32_t(b[4]) | uint32_t(b[5]) << 8 | uint32_t(b[6]) << 16 | uint32_t(b[7]) << 24;
    c = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
        t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
  }
  for (; n > 0; --n, ++b) c = t[0][(c ^ *b) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string FileHeader(uint64_t committed) {
  std::string h(kMagic4, kMagicSize);
  h.append(reinterpret_cast<const char*>(&committed), 8);
  const uint32_t crc = Crc32(h);
  h.append(reinterpret_cast<const char*>(&crc), 4);
  return h;
}

void AppendRecord(const std::string& payload, std::string* out) {
  char h[kRecordHeaderSize];
  const uint32_t len = uint32_t(payload.size()), crc = Crc32(payload);
  std::memcpy(h, &len, 4);
  std::memcpy(h + 4, &crc, 4);
  const uint32_t hcrc = Crc32(h, 8);
  std::memcpy(h + 8, &hcrc, 4);
  out->append(h, kRecordHeaderSize).append(payload);
}

std::string Record(const std::string& payload) {
  std::string r;
  r.reserve(kRecordHeaderSize + payload.size());
  AppendRecord(payload, &r);
  return r;
}

Result<std::string> ReadWhole(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path);
    return Status::Unavailable("open " + path + ": " + std::strerror(errno));
  }
  std::string data;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Status::Unavailable("read " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    data.append(buf, size_t(n));
  }
  ::close(fd);
  return data;
}

Status ParseFile(const std::string& path, const std::string& data, FileKind kind, FileContents* out) {
  *out = FileContents{};
  out->size = data.size();
  const bool snapshot = kind == FileKind::kSnapshot;
  // What a crash while a file was created can leave (journal.cc creates files whole
  // and renames them into place; older versions wrote a new journal's magic in place).
  if (data.empty() || ProperPrefixOf(data, FileHeader(kFileHeaderSize)) ||
      ProperPrefixOf(data, std::string(kMagic3, kMagicSize))) {
    out->remnant = true;
    return Status::OK();
  }
  if (StartsWith(data, kMagic4)) {
    out->format = 4;
    if (data.size() < kFileHeaderSize) return Status::DataLoss(At(path, data.size()) + "the file's header is cut short");
    if (Crc32(data.data(), 16) != Load32(data, 16))
      return Status::DataLoss(At(path, kMagicSize) + "the file's header fails its checksum");
    std::memcpy(&out->committed, data.data() + kMagicSize, 8);
    if (out->committed < kFileHeaderSize)
      return Status::DataLoss(At(path, kMagicSize) + "the file's header claims " + std::to_string(out->committed) +
                              " committed bytes, fewer than the header itself");
    if (snapshot && out->committed != data.size())
      return Status::DataLoss(At(path, std::min<uint64_t>(out->committed, data.size())) + "a snapshot of " +
                              std::to_string(data.size()) + " bytes whose header says it has " +
                              std::to_string(out->committed) + " (cut short, or bytes added)");
    return ParseRecords(path, data, kFileHeaderSize, out->committed, out);
  }
  if (StartsWith(data, kMagic3) || StartsWith(data, kMagic2)) {
    out->format = StartsWith(data, kMagic3) ? 3 : 2;
    Status s = ParseRecords(path, data, kMagicSize, snapshot ? data.size() : kMagicSize, out);
    if (s.ok() && out->format == 2) CountEpochs(&out->updates);
    return s;
  }
  if (!IsFormat1(data)) {
    return Status::DataLoss(At(path, FirstBadMagicByte(data)) +
                            "not a journal of any format this dispatcher knows (its first bytes are neither a known "
                            "magic nor a whole record of format 1); nothing in the work dir was changed");
  }
  out->format = 1;
  Status s = ParseRecordsV1(path, data, snapshot, out);
  if (s.ok()) CountEpochs(&out->updates);
  return s;
}

std::string FormatStateId(const std::string& id) {
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08x", unsigned(Crc32(id)));
  return id + " " + crc + "\n";
}

Result<std::string> ParseStateId(const std::string& path, const std::string& data, bool* legacy) {
  const auto is_hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  size_t digits = 0;
  while (digits < data.size() && digits < 16 && is_hex(data[digits])) ++digits;
  *legacy = digits == 16 && data.size() == 16;  // written before the CRC
  if (*legacy) return data;
  if (digits == 16 && data == FormatStateId(data.substr(0, 16))) return data.substr(0, 16);
  // Where it goes wrong: the first byte that is no hex digit, or else the first that
  // differs from what the 16 digits and their CRC would be.
  size_t bad = digits;
  if (digits == 16) {
    const std::string want = FormatStateId(data.substr(0, 16));
    while (bad < data.size() && bad < want.size() && data[bad] == want[bad]) ++bad;
  }
  return Status::DataLoss(At(path, bad) + "not a state id (16 hex digits, a space, their CRC-32 in 8, a newline; " +
                          std::to_string(data.size()) + " bytes)");
}

}  // namespace ferry::dispatch::internal
