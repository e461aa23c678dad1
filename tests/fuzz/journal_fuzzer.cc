// libFuzzer target for the dispatcher's work dir files (lib/dispatch/journal_file.h):
// any bytes as a journal (generation 0) or as a snapshot and its journal (generation 1),
// whole as the fuzzer made them, magic and header included (its seeds are real files of
// format 4, so it mutates from the magic on), or after a header or magic it adds (format
// 4, 3 or 2, so that it spends its time past them), beside a state-id or not.
// Journal::Open must return the updates or an error, never crash. When it refuses, the
// work dir is exactly as it was. When it opens, the files it leaves (a torn tail cut)
// take one more record and open again with the same updates and that record after
// them; an older format is upgraded, and the files it was read from are kept whole as
// *.replaced. Every update replayed re-encodes to bytes that decode and re-encode the
// same. The work dir is on /dev/shm when it can be: no fsync of a real disk per input.
//
//   journal_fuzzer --write-seeds DIR   writes seed files (work dirs the journal wrote) and exits
//   journal_fuzzer [libFuzzer flags] CORPUS...   (see tests/fuzz/run.sh)
#include <fuzzer/FuzzedDataProvider.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/log.h"
#include "dispatch/journal.h"
#include "dispatch/journal_file.h"
#include "fuzz_util.h"

namespace {

using namespace ferry;            // NOLINT
using namespace ferry::dispatch;  // NOLINT

std::string& WorkDir() {
  static std::string dir;
  return dir;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void Clear(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) std::filesystem::remove(e.path(), ec);
}

// Every file of the work dir, by name.
std::map<std::string, std::string> Contents(const std::string& dir) {
  std::map<std::string, std::string> all;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    all[e.path().filename().string()] = ReadFile(e.path().string());
  return all;
}

void CheckRoundTrip(const Update& u) {
  const std::string once = EncodeUpdate(u);
  Result<Update> back = DecodeUpdate(once);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(EncodeUpdate(*back) == once);
}

// Input: one control byte, then two bytes of where the snapshot ends (generation 1),
// then bytes. Control bits:
//   0     generation 1: a snapshot (the bytes up to the cut) and its journal (the rest)
//   1-2   what each file starts with before the bytes: 0 a format 4 header (see bit 3),
//         1 nothing (the bytes are whole files: format 4 seeds, format 1, anything),
//         2 format 2's magic, 3 format 3's
//   3     the format 4 header's committed length: the whole file (sealed), or only the
//         header (a journal whose records all came after its last sync)
//   4     no state-id file beside them (a valid one otherwise)
void RunOne(const uint8_t* data, size_t size) {
  if (size < 3) return;
  const std::string& dir = WorkDir();
  Clear(dir);
  const uint8_t control = data[0];
  const bool with_snapshot = control & 1, sealed = control & 8, no_id = control & 16;
  const int start = (control >> 1) & 3;
  const size_t cut = size_t(data[1]) | size_t(data[2]) << 8;
  const std::string bytes(reinterpret_cast<const char*>(data) + 3, size - 3);
  auto file = [&](const std::string& body, bool snapshot) {
    if (start == 1) return body;
    if (start == 2) return "FERRYJ2\n" + body;
    if (start == 3) return "FERRYJ3\n" + body;
    const uint64_t whole = internal::kFileHeaderSize + body.size();
    return internal::FileHeader(sealed || snapshot ? whole : internal::kFileHeaderSize) + body;
  };
  if (with_snapshot) {
    const size_t at = std::min(cut, bytes.size());
    WriteFile(dir + "/snapshot-1", file(bytes.substr(0, at), true));
    WriteFile(dir + "/journal-1", file(bytes.substr(at), false));
  } else {
    WriteFile(dir + "/journal-0", file(bytes, false));
  }
  if (!no_id) WriteFile(dir + "/state-id", internal::FormatStateId("0123456789abcdef"));
  const std::map<std::string, std::string> before = Contents(dir);
  std::vector<Update> replay;
  std::vector<std::string> first;
  int format = 0;
  uint64_t generation = 0;
  {
    Result<std::unique_ptr<Journal>> j = Journal::Open(dir, &replay);
    if (!j.ok()) {  // refused: fine, as long as it said so and changed nothing
      FUZZ_CHECK(j.status().code() != StatusCode::kOk);
      FUZZ_CHECK(Contents(dir) == before);
      return;
    }
    for (const Update& u : replay) {
      CheckRoundTrip(u);
      first.push_back(EncodeUpdate(u));
    }
    format = (*j)->format_read();
    generation = (*j)->generation();
    FUZZ_CHECK((*j)->state_id().size() == 16);
    (*j)->set_sync(false);
    FUZZ_CHECK((*j)->Append(RegisterWorker{"fuzz", "127.0.0.1:1"}).ok());
    FUZZ_CHECK((*j)->Sync().ok());
  }
  if (format < 4) {
    // Upgraded: a new generation, and the files it was read from kept whole.
    const uint64_t from = with_snapshot ? 1 : 0;
    FUZZ_CHECK(generation == from + 1);
    const auto after = Contents(dir);
    for (const auto& [name, b] : before) {
      if (name == "state-id") continue;
      auto it = after.find(name + ".replaced");
      FUZZ_CHECK(it != after.end() && it->second == b);
    }
  }
  std::vector<Update> again;
  Result<std::unique_ptr<Journal>> j = Journal::Open(dir, &again);
  FUZZ_CHECK(j.ok());
  FUZZ_CHECK((*j)->format_read() == 4);
  FUZZ_CHECK(std::get<RegisterWorker>(again.back()).worker == "fuzz");
  if (format == 4) {  // the same records, and the one appended
    FUZZ_CHECK(again.size() == first.size() + 1);
    for (size_t i = 0; i < first.size(); ++i) FUZZ_CHECK(EncodeUpdate(again[i]) == first[i]);
  }
}

// Seeds: work dirs as the journal writes them (every kind of update), taken as whole
// files from the magic on: sealed, cut short, with a snapshot after a compaction; and the
// records alone behind a format 3 magic (an older work dir, upgraded on opening).
void WriteSeeds(const std::string& out) {
  ::mkdir(out.c_str(), 0755);
  const std::string dir = WorkDir();
  JobSpec spec;
  spec.dataset = "/data";
  spec.num_samples = 40;
  spec.batch_size = 10;
  spec.batches_per_split = 1;
  spec.epochs = 2;
  const std::vector<Update> all = {
      CreateJob{"j0", spec}, AddConsumer{"j0", "c0"}, RegisterWorker{"w0", "127.0.0.1:1", "", ""},
      LeaseSplits{"j0", "w0", {{{0, 0}, "c0"}, {{0, 1}, "c0"}}}, AckSplits{"j0", "c0", {{0, 0}}},
      ReturnSplits{"j0", "w0"}, AssignSplits{"j0", "c0", {{0, 1}}}, DrainWorker{"w0"},
      JobProgress{"j0", 1}, RestoreConsumer{"j0", "c0", 0, {{0, 0}}}, RemoveConsumer{"j0", "c0"},
      RemoveWorker{"w0"}, RemoveJob{"j0"}};
  int n = 0;
  auto seed = [&](uint8_t control, size_t cut, const std::string& body) {
    std::string s;
    s += char(control);
    s += char(cut & 0xff);
    s += char((cut >> 8) & 0xff);
    WriteFile(out + "/seed-" + std::to_string(n++), s + body);
  };
  // Generation 0, sealed when the journal closed.
  Clear(dir);
  {
    std::vector<Update> none;
    auto j = Journal::Open(dir, &none);
    FUZZ_CHECK(j.ok());
    for (const Update& u : all) FUZZ_CHECK((*j)->Append(u).ok());
  }
  const std::string journal = ReadFile(dir + "/journal-0");
  seed(2, 0, journal);
  seed(2, 0, journal.substr(0, journal.size() - 5));
  const std::string records = journal.substr(internal::kFileHeaderSize);
  seed(8, 0, records);                                   // the fuzzer adds a sealed header
  seed(0, 0, records.substr(0, records.size() - 5));     // committed: the header alone
  seed(6, 0, records);                                   // format 3
  seed(1 | 6, records.size() / 2, records);              // format 3, with a snapshot
  seed(0, 0, "");
  // Generation 1: a compaction halfway, whole files, the cut between them.
  Clear(dir);
  {
    std::vector<Update> none;
    DispatcherState s;
    auto j = Journal::Open(dir, &none, &s);
    FUZZ_CHECK(j.ok());
    for (size_t i = 0; i < all.size(); ++i) {
      if (!s.Apply(all[i]).ok()) continue;  // the list is every kind, not a history
      FUZZ_CHECK((*j)->Append(all[i]).ok());
      if (i == all.size() / 2) FUZZ_CHECK((*j)->Compact(s).ok());
    }
  }
  const std::string snapshot = ReadFile(dir + "/snapshot-1"), journal1 = ReadFile(dir + "/journal-1");
  seed(1 | 2, snapshot.size(), snapshot + journal1);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  ferry::SetLogLevel(ferry::LogLevel::kError);
  std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path().string();
  std::string templ = base + "/ferry-journal-fuzz-XXXXXX";
  FUZZ_CHECK(::mkdtemp(templ.data()) != nullptr);
  WorkDir() = templ;
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(WorkDir(), ec);
  });
  for (int i = 1; i + 1 < *argc; ++i) {
    if (std::strcmp((*argv)[i], "--write-seeds") == 0) {
      WriteSeeds((*argv)[i + 1]);
      std::exit(0);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RunOne(data, size);
  return 0;
}
