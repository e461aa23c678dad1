// The bytes of the dispatcher's work dir (lib/dispatch/journal.h says what the files are
// for): the journal and snapshot files of every format, and the state-id file. Reading
// here is pure: it takes a file's bytes and returns its records or why they cannot be
// trusted; nothing here writes.
//
// Format 4 (written now), for journal-G and snapshot-G alike:
//   0   "FERRYJ4\n"
//   8   u64 committed: bytes from the file's start that hold whole, durable records
//   16  u32 CRC-32 of bytes 0..16
//   20  records: u32 payload length, u32 CRC-32 of the payload, u32 CRC-32 of those 8
//       bytes, payload (EncodeUpdate)
// A snapshot is written whole, so its committed length is its size. A journal's is
// rewritten in place before each fdatasync with the length the previous fdatasync made
// durable (never a length whose bytes could still be in flight), and with the whole
// length when the journal is closed or idle (Journal::Seal). So a journal is protected
// against truncation up to its committed length; past it only the records of the last
// group commit before a crash can lie, and only there is a torn record accepted.
//
// The reading rules (every refusal is DataLoss naming the file and an offset):
//   - A file is read as a format only when it positively is one: format 2, 3 and 4 by
//     their magic; format 1 (no magic) only when its first record is whole, passes its
//     checksum and decodes. Anything else that is not empty is no journal.
//   - Before the committed length every record must be whole and valid, and the last
//     must end exactly there; a snapshot must end exactly at its committed length.
//   - Past it (a journal of format 4), or anywhere in a journal of formats 1 to 3, a torn
//     tail is the true tail alone: zeros to the end of the file, a header cut short, a
//     whole header whose payload runs past the end, or a last record whose payload fails
//     its checksum. A header that fails its own checksum, or a record that fails its
//     checksum before the end, is DataLoss.
//   - An empty file, or one cut short inside a new file's header, is a "remnant": what a
//     crash during creation leaves. Journal::Open decides whether it can be one.
#ifndef FERRY_DISPATCH_JOURNAL_FILE_H_
#define FERRY_DISPATCH_JOURNAL_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "dispatch/state.h"
#include "ferry/status.h"

namespace ferry::dispatch::internal {

constexpr int kCurrentFormat = 4;
constexpr size_t kFileHeaderSize = 20;  // format 4: magic, committed length, CRC

uint32_t Crc32(const char* p, size_t n);
inline uint32_t Crc32(const std::string& s) { return Crc32(s.data(), s.size()); }

// A format 4 file's header claiming `committed` bytes.
std::string FileHeader(uint64_t committed);
// One record of formats 2 to 4 around an encoded update; AppendRecord appends it to *out.
std::string Record(const std::string& payload);
void AppendRecord(const std::string& payload, std::string* out);

enum class FileKind { kJournal, kSnapshot };

struct FileContents {
  int format = 0;         // 1 to 4; 0 for a remnant
  bool remnant = false;   // empty, or a creation's header cut short (see above)
  std::vector<Update> updates;
  std::vector<uint64_t> offsets;  // where each update's record starts
  uint64_t committed = 0;         // format 4: the header's committed length
  int64_t torn_at = -1;           // a journal's torn tail starts here (the offset to cut at)
  uint64_t size = 0;
};

// Reads a whole file: NotFound if it does not exist, Unavailable on an I/O error.
Result<std::string> ReadWhole(const std::string& path);
// The records of `data`, the bytes of the file at `path` (named in errors), by the rules
// above. The jobs of formats 1 and 2 come out with format 3's meaning of `epochs`.
Status ParseFile(const std::string& path, const std::string& data, FileKind kind, FileContents* out);

// The state-id file: 16 hex digits, a space, the CRC-32 of those 16 as 8 hex digits, a
// newline. Files written before the CRC (the 16 digits alone) are read as `legacy`.
std::string FormatStateId(const std::string& id);
Result<std::string> ParseStateId(const std::string& path, const std::string& data, bool* legacy);

}  // namespace ferry::dispatch::internal

#endif  // FERRY_DISPATCH_JOURNAL_FILE_H_
