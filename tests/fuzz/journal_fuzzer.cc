// libFuzzer target for the dispatcher's journal files (lib/dispatch/journal.h): any
// bytes as a work dir's journal (generation 0) or as a snapshot and its journal
// (generation 1), in format 3 (most inputs get its magic, so that the fuzzer spends its
// time past it), format 2 (its jobs' epochs converted on reading) or format 1.
// Journal::Open must return the updates or an error, never
// crash; and when it opens, the file it leaves (a torn tail cut) must take one more
// record and open again with the same updates and that record after them. Every
// update replayed re-encodes to bytes that decode and re-encode the same. The work dir
// is on /dev/shm when it can be: no fsync of a real disk per input.
//
//   journal_fuzzer --write-seeds DIR   writes seed files (journals the codec wrote) and exits
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
#include <string>
#include <vector>

#include "core/log.h"
#include "dispatch/journal.h"
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

void Clear(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) std::filesystem::remove(e.path(), ec);
}

void CheckRoundTrip(const Update& u) {
  const std::string once = EncodeUpdate(u);
  Result<Update> back = DecodeUpdate(once);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(EncodeUpdate(*back) == once);
}

// Input: one control byte (bit 0: generation 1 with a snapshot; bit 1: format 1, no
// magic added; bit 2: format 2's magic rather than format 3's), then two bytes of
// where the snapshot ends (generation 1), then bytes.
void RunOne(const uint8_t* data, size_t size) {
  if (size < 3) return;
  const std::string& dir = WorkDir();
  Clear(dir);
  const bool with_snapshot = data[0] & 1, v1 = data[0] & 2, v2 = data[0] & 4;
  const size_t cut = size_t(data[1]) | size_t(data[2]) << 8;
  std::string bytes(reinterpret_cast<const char*>(data) + 3, size - 3);
  const std::string magic = v1 ? "" : v2 ? "FERRYJ2\n" : "FERRYJ3\n";
  if (with_snapshot) {
    const size_t at = std::min(cut, bytes.size());
    WriteFile(dir + "/snapshot-1", magic + bytes.substr(0, at));
    WriteFile(dir + "/journal-1", magic + bytes.substr(at));
  } else {
    WriteFile(dir + "/journal-0", magic + bytes);
  }
  std::vector<Update> replay;
  std::vector<std::string> first;
  {
    Result<std::unique_ptr<Journal>> j = Journal::Open(dir, &replay);
    if (!j.ok()) return;  // refused: fine, as long as it said so
    for (const Update& u : replay) {
      CheckRoundTrip(u);
      first.push_back(EncodeUpdate(u));
    }
    (*j)->set_sync(false);
    if ((*j)->upgrade_due()) {
      // As the dispatcher does: formats 1 and 2 become a format 3 snapshot before anything is
      // appended. The state may refuse what the fuzzer wrote; compact what it holds.
      DispatcherState s;
      for (const Update& u : replay) (void)s.Apply(u);
      if (!(*j)->Compact(s).ok()) return;
      return;  // the snapshot holds the state, not the updates: nothing to compare
    }
    FUZZ_CHECK((*j)->Append(RegisterWorker{"fuzz", "127.0.0.1:1"}).ok());
    FUZZ_CHECK((*j)->Sync().ok());
  }
  std::vector<Update> again;
  Result<std::unique_ptr<Journal>> j = Journal::Open(dir, &again);
  FUZZ_CHECK(j.ok());
  FUZZ_CHECK(again.size() == first.size() + 1);
  for (size_t i = 0; i < first.size(); ++i) FUZZ_CHECK(EncodeUpdate(again[i]) == first[i]);
  FUZZ_CHECK(std::get<RegisterWorker>(again.back()).worker == "fuzz");
}

// Seeds: journals as the codec writes them (every kind of update), whole, cut short,
// and as generation 1 with the records split between the snapshot and the journal.
void WriteSeeds(const std::string& out) {
  ::mkdir(out.c_str(), 0755);
  const std::string dir = WorkDir();
  Clear(dir);
  {
    std::vector<Update> none;
    auto j = Journal::Open(dir, &none);
    FUZZ_CHECK(j.ok());
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
    for (const Update& u : all) FUZZ_CHECK((*j)->Append(u).ok());
  }
  std::ifstream in(dir + "/journal-0", std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string records = file.substr(8);  // the fuzzer's input adds the magic
  int n = 0;
  auto seed = [&](uint8_t control, size_t cut, const std::string& body) {
    std::string s;
    s += char(control);
    s += char(cut & 0xff);
    s += char((cut >> 8) & 0xff);
    WriteFile(out + "/seed-" + std::to_string(n++), s + body);
  };
  seed(0, 0, records);
  seed(0, 0, records.substr(0, records.size() - 5));
  seed(1, records.size() / 2, records);
  seed(0, 0, "");
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
