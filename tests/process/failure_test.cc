// Failure semantics with real processes (issue 11): each test stages one ordinary
// event that used to break a promise of Ferry's (nothing crashes a daemon, exactly
// once, nobody uninvited) and checks that it now holds. The daemons are the real
// ferry-worker and ferry-dispatcher; a raw peer (tests/raw_peer.h) speaks the
// protocol by hand where a test needs a request the Client would never send.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "process/daemon_test.h"

namespace ferry {
namespace {

using testing::Child;
using testing::ExpectEachIndexOnce;
using testing::Lines;
using wire::MessageType;
using testing::MakeImageFolder;
using testing::RawPeer;
using testing::ReadFile;
using testing::TempDir;
using testing::WaitFor;
using testing::WaitForListening;
using testing::Watchdog;
using testing::kClasses;
using testing::kPerClass;
using testing::kSamples;
using testing::kSpecJson;

class FailureTest : public testing::DaemonTest {};

// Case 1: a request for more memory than the worker has. It used to die of an
// uncaught std::bad_alloc in the producer thread; now the request is refused with a
// clear error and the worker serves the next client.
TEST_F(FailureTest, AnOversizedBatchIsRefusedAndTheWorkerLives) {
  std::string worker;
  auto w = StartWorker({"--max-memory", "64MB"}, &worker);
  constexpr char kFloat224[] =
      R"({"ops":[{"op":"random_resized_crop","size":224}],"output":{"dtype":"float32","layout":"NCHW"}})";
  constexpr char kUint8_224[] =
      R"({"ops":[{"op":"random_resized_crop","size":224}],"output":{"dtype":"uint8","layout":"NHWC"}})";
  // 200000 x 3 x 224 x 224 float32: 112 GiB per batch, past the 2 GiB any batch may take.
  Status big = OpenRaw(worker, Job(200000, kFloat224));
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument) << big.ToString();
  EXPECT_NE(big.message().find("batch_size"), std::string::npos) << big.ToString();
  // 200 x 224 x 224 x 3 uint8: 29 MiB per batch, 4 of them past this worker's 64 MB.
  Status budget = OpenRaw(worker, Job(200, kUint8_224));
  EXPECT_EQ(budget.code(), StatusCode::kResourceExhausted) << budget.ToString();
  EXPECT_NE(budget.message().find("--max-memory"), std::string::npos) << budget.ToString();
  ASSERT_FALSE(w->Wait(0.2).has_value()) << "the worker died: " << w->err();
  ExpectAnEpochFrom(worker);
  // The refused streams gave their reservations back: a stream that fits still opens
  // (4 x 14 MiB would not fit beside a leaked 4 x 29 MiB).
  EXPECT_TRUE(OpenRaw(worker, Job(100, kUint8_224)).ok());
}

// Case 5: what a daemon lets a peer do before it authenticates. A frame header
// claiming a 4 GiB Batch, or a 1 MiB "Hello", used to make the daemon reserve the
// body and wait for it; a silent connection was kept forever; connections were not
// capped. Now the header alone closes the connection, the handshake has a deadline,
// and the oldest handshaking connection makes room for a new one.
TEST_F(FailureTest, PeersThatHaveNotAuthenticatedHoldLittle) {
  std::string dispatcher, worker;
  auto d = StartDispatcher({"--handshake-timeout", "1", "--max-handshaking", "4"}, &dispatcher);
  auto w = StartWorker({"--handshake-timeout", "1", "--max-handshaking", "4"}, &worker);
  for (const std::string& daemon : {dispatcher, worker}) {
    SCOPED_TRACE(daemon == dispatcher ? "dispatcher" : "worker");
    {
      RawPeer p(daemon);
      ASSERT_TRUE(p.Expect(MessageType::kChallenge).ok());
      p.Send(testing::RawHeader("FRY1", wire::kProtocolVersion, uint16_t(MessageType::kBatch), 4ull << 30));
      EXPECT_TRUE(p.WaitClosed(2)) << "a 4 GiB Batch header before Hello did not close the connection";
    }
    {
      RawPeer p(daemon);
      ASSERT_TRUE(p.Expect(MessageType::kChallenge).ok());
      p.Send(testing::RawHeader("FRY1", wire::kProtocolVersion, uint16_t(MessageType::kHello), 1 << 20));
      EXPECT_TRUE(p.WaitClosed(2)) << "a 1 MiB Hello did not close the connection";
    }
    {
      RawPeer silent(daemon);
      ASSERT_TRUE(silent.Expect(MessageType::kChallenge).ok());
      EXPECT_TRUE(silent.WaitClosed(5)) << "a connection that never said Hello was kept";
    }
    // Ten silent connections, four handshaking at most: the six oldest are closed at once.
    std::vector<std::unique_ptr<RawPeer>> flood;
    for (int i = 0; i < 10; ++i) {
      flood.push_back(std::make_unique<RawPeer>(daemon));
      ASSERT_TRUE(flood.back()->Expect(MessageType::kChallenge).ok());
    }
    int closed = 0;
    for (int i = 0; i < 6; ++i) closed += flood[size_t(i)]->WaitClosed(0.5) ? 1 : 0;
    EXPECT_EQ(closed, 6);
    // An honest peer gets in beside the flood.
    RawPeer honest(daemon);
    EXPECT_TRUE(honest.Handshake().ok());
  }
  // Both daemons live and serve: a dispatcher job through the worker.
  ASSERT_FALSE(d->Wait(0.1).has_value()) << d->err();
  ASSERT_FALSE(w->Wait(0.1).has_value()) << w->err();
  auto w2 = StartWorker({"--dispatcher", dispatcher});
  const std::string dump = dir_ / "dispatched.txt";
  Child c({consume_bin_, "--dispatcher", dispatcher, "--job", "j", "--data", data_->path(), "--pipeline", kSpecJson,
           "--batch-size", "8", "--epochs", "1", "--dump-indices", dump},
          dir_ / "c.out", dir_ / "c.err");
  const std::optional<int> rc = c.Wait(60);
  ASSERT_TRUE(rc.has_value()) << c.err();
  EXPECT_EQ(*rc, 0) << c.err();
  ExpectEachIndexOnce(ReadFile(dump), kSamples);
}

// Case 2: a consumer of a shared job vanishes. Its splits used to keep it forever: the
// survivor ended "successfully" with part of the job, or waited forever once the
// dead consumer's leases filled the workers' budgets. Now the dispatcher removes a
// consumer silent past --consumer-timeout-ms and its unfinished splits go to the
// survivor, which reads every sample of every epoch that the dead one had not.
TEST_F(FailureTest, AVanishedConsumersSplitsGoToTheSurvivor) {
  std::string dispatcher;
  auto d = StartDispatcher({"--consumer-timeout-ms", "1000"}, &dispatcher);
  auto w1 = StartWorker({"--dispatcher", dispatcher});
  auto w2 = StartWorker({"--dispatcher", dispatcher});
  constexpr int kEpochs = 3;
  auto consume = [&](const std::string& id, const std::string& dump) {
    return std::make_unique<Child>(
        std::vector<std::string>{consume_bin_, "--dispatcher", dispatcher, "--job", "shared", "--consumer-id", id,
                                 "--data", data_->path(), "--pipeline", kSpecJson, "--batch-size", "3",
                                 "--batches-per-split", "2", "--epochs", std::to_string(kEpochs), "--dump-indices",
                                 dump, "--step-ms", "20"},
        dir_ / (id + ".out"), dir_ / (id + ".err"));
  };
  const std::string dump_a = dir_ / "a.txt", dump_b = dir_ / "b.txt";
  auto a = consume("a", dump_a);
  auto b = consume("b", dump_b);
  ASSERT_TRUE(WaitFor([&] { return Lines(ReadFile(dump_a)).size() >= size_t(kSamples) / 3; }, 40)) << a->err();
  a->Kill();
  const std::optional<int> rc = b->Wait(90);
  ASSERT_TRUE(rc.has_value()) << "the survivor did not finish: " << b->err();
  EXPECT_EQ(*rc, 0) << b->err();
  // Every sample reached a consumer in every epoch. The survivor read none twice in
  // one epoch; the dead one may have read some that the survivor read again: those of
  // its splits it had not acknowledged when it died (at most its prefetch).
  std::map<int64_t, int> by_b, by_a;
  for (const std::string& l : Lines(ReadFile(dump_b))) ++by_b[std::stoll(l)];
  for (const std::string& l : Lines(ReadFile(dump_a))) ++by_a[std::stoll(l)];
  int64_t repeated = 0;
  for (int64_t i = 0; i < kSamples; ++i) {
    EXPECT_LE(by_b[i], kEpochs) << "index " << i;
    EXPECT_GE(by_a[i] + by_b[i], kEpochs) << "index " << i << " missing from an epoch";
    repeated += std::max(0, by_a[i] + by_b[i] - kEpochs);
  }
  EXPECT_LE(repeated, 4 * 2 * 3) << "more repeats than the dead consumer's unacknowledged splits could hold";
  EXPECT_NE(d->err().find("consumer a silent"), std::string::npos) << d->err();
}

// Case 9: silent truncation. A client took any "no such job" for "the job finished",
// so a dispatcher restarted on an empty work dir ended every client's data mid-epoch
// with exit 0. Now each work dir has an identity the client checks. And a saved
// iterator state names its job's settings: resuming it into other settings fails.
TEST_F(FailureTest, ADispatcherThatLostItsStateIsNotTakenForTheJobsEnd) {
  const std::string listen = "127.0.0.1:" + std::to_string(testing::FreePort());
  std::string dispatcher;
  auto d = StartDispatcher({}, &dispatcher, listen, "journal-a");
  auto w = StartWorker({"--dispatcher", dispatcher});
  const std::string dump = dir_ / "indices.txt";
  std::vector<std::string> argv = {consume_bin_, "--dispatcher", dispatcher, "--job", "j", "--data", data_->path(),
                                   "--pipeline", kSpecJson, "--batch-size", "3", "--batches-per-split", "2",
                                   "--epochs", "1", "--dump-indices", dump, "--step-ms", "40"};
  Child c(argv, dir_ / "c.out", dir_ / "c.err");
  ASSERT_TRUE(WaitFor([&] { return Lines(ReadFile(dump)).size() >= 6; }, 40)) << c.err();
  d->Kill();
  auto d2 = StartDispatcher({}, nullptr, listen, "journal-b");  // the same address, an empty work dir
  const std::optional<int> rc = c.Wait(60);
  ASSERT_TRUE(rc.has_value()) << c.err();
  EXPECT_NE(*rc, 0) << "the client ended as if the job had finished, with " << Lines(ReadFile(dump)).size()
                    << " of " << kSamples << " samples";
  EXPECT_NE(c.err().find("another state"), std::string::npos) << c.err();

  // A state saved under one seed, resumed under another: refused, naming the cause.
  auto d3 = StartDispatcher({}, &dispatcher, "127.0.0.1:0", "journal-c");
  auto w3 = StartWorker({"--dispatcher", dispatcher});
  const std::string state = dir_ / "state.txt";
  Child save({consume_bin_, "--dispatcher", dispatcher, "--job", "k", "--data", data_->path(), "--pipeline",
              kSpecJson, "--batch-size", "3", "--epochs", "1", "--seed", "1", "--stop-after", "2", "--save-state",
              state},
             dir_ / "s.out", dir_ / "s.err");
  ASSERT_EQ(save.Wait(60).value_or(-1), 0) << save.err();
  Child resume({consume_bin_, "--dispatcher", dispatcher, "--job", "k", "--data", data_->path(), "--pipeline",
                kSpecJson, "--batch-size", "3", "--epochs", "1", "--seed", "2", "--resume", state},
               dir_ / "r.out", dir_ / "r.err");
  const std::optional<int> rrc = resume.Wait(60);
  ASSERT_TRUE(rrc.has_value());
  EXPECT_NE(*rrc, 0);
  EXPECT_NE(resume.err().find("other settings"), std::string::npos) << resume.err();
}

// Case 8: a full disk. The dispatcher abort()ed when its journal could not be written,
// so restarted on the same full disk it crash-looped. Now it refuses changes with the
// reason and stays up, and once there is room again it writes what it queued and takes
// changes: the job runs, and a restart replays all of it. The disk is a 1 MiB tmpfs,
// filled after the dispatcher started (so that its very next record needs a page).
TEST_F(FailureTest, AFullDiskRefusesChangesAndRecovers) {
  const std::string disk = dir_ / "disk";
  std::filesystem::create_directories(disk);
  if (::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "): this test needs root";
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{disk};
  const std::string listen = "127.0.0.1:" + std::to_string(testing::FreePort());
  std::string dispatcher;
  auto d = StartDispatcher({}, &dispatcher, listen, "disk/journal");
  // The journal's file holds a page (its magic); records fill it before the next page
  // is asked for. Registrations fill it up to less than 150 bytes of room, so that the
  // job's first record (larger) needs a page the full disk does not have.
  const std::string journal = disk + "/journal/journal-0";
  for (int i = 0; 4096 - std::filesystem::file_size(journal) % 4096 >= 150; ++i) {
    ASSERT_LT(i, 200) << "the journal does not grow";
    testing::RawPeer p(dispatcher);
    ASSERT_TRUE(p.Handshake("", wire::Role::kWorker).ok());
    ASSERT_TRUE(p.Send(wire::EncodeRegisterWorker({"pad-" + std::to_string(i), "127.0.0.1:1"})));
    ASSERT_TRUE(p.Expect(wire::MessageType::kRegisterWorkerOk, 10).ok());
  }
  {  // fill it
    std::ofstream filler(disk + "/filler", std::ios::binary);
    const std::string block(64 << 10, 'x');
    for (int i = 0; i < 64 && filler.write(block.data(), std::streamsize(block.size())); ++i) {
    }
  }
  auto w = StartWorker({"--dispatcher", dispatcher});
  const std::string dump = dir_ / "indices.txt";
  Child c({consume_bin_, "--dispatcher", dispatcher, "--job", "full", "--data", data_->path(), "--pipeline",
           kSpecJson, "--batch-size", "3", "--batches-per-split", "2", "--epochs", "1", "--dump-indices", dump},
          dir_ / "c.out", dir_ / "c.err");
  ASSERT_TRUE(WaitFor([&] { return d->err().find("cannot write the journal") != std::string::npos; }, 20))
      << d->err();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_FALSE(d->Wait(0).has_value()) << "the dispatcher exited on a full disk: " << d->err();
  EXPECT_FALSE(c.Wait(0).has_value()) << "the consumer gave up within 2 s: " << c.err();
  EXPECT_TRUE(Lines(ReadFile(dump)).empty()) << "a job ran that the journal could not hold";
  std::filesystem::remove(disk + "/filler");
  const std::optional<int> rc = c.Wait(60);
  ASSERT_TRUE(rc.has_value()) << "no recovery once there was room: " << d->err();
  EXPECT_EQ(*rc, 0) << c.err();
  ExpectEachIndexOnce(ReadFile(dump), kSamples);
  EXPECT_NE(d->err().find("can be written again"), std::string::npos) << d->err();
  // The journal is whole: a restart replays it (a corrupt record would be DataLoss).
  d->Kill();
  w->Kill();
  auto d2 = StartDispatcher({}, nullptr, listen, "disk/journal");
  EXPECT_NE(d2->err().find("replayed"), std::string::npos) << d2->err();
}

// Case 4: a worker whose dataset is missing kept taking leases of the job, and its
// streams refused them, failing every consumer. Here one worker runs in a mount
// namespace of its own where the dataset folder is an empty tmpfs (a host without the
// mount). Alone, it makes the client fail at once with its reason rather than wait
// forever; beside a worker that has the data, the job arrives exactly once.
TEST_F(FailureTest, AWorkerWithoutTheDatasetTakesNoSplitsOfIt) {
  if (std::system("unshare -m true 2>/dev/null") != 0) GTEST_SKIP() << "cannot unshare a mount namespace (needs root)";
  std::string dispatcher;
  auto d = StartDispatcher({}, &dispatcher);
  Child blind({"/usr/bin/unshare", "-m", "/bin/sh", "-c",
               "mount -t tmpfs none '" + data_->path() + "' && exec '" + worker_bin_ +
                   "' --listen 127.0.0.1:0 --threads 1 --dispatcher " + dispatcher},
              dir_ / "blind.out", dir_ / "blind.err");
  WaitForListening(blind, "blind");
  auto consume = [&](const std::string& job, const std::string& dump) {
    return std::make_unique<Child>(
        std::vector<std::string>{consume_bin_, "--dispatcher", dispatcher, "--job", job, "--data", data_->path(),
                                 "--pipeline", kSpecJson, "--batch-size", "3", "--batches-per-split", "2",
                                 "--epochs", "1", "--dump-indices", dump},
        dir_ / (job + ".out"), dir_ / (job + ".err"));
  };
  auto alone = consume("alone", dir_ / "alone.txt");
  const std::optional<int> arc = alone->Wait(60);
  ASSERT_TRUE(arc.has_value()) << "the client waited on a worker that cannot serve its job: " << alone->err();
  EXPECT_NE(*arc, 0);
  EXPECT_NE(alone->err().find("no worker can serve job alone"), std::string::npos) << alone->err();
  EXPECT_NE(d->err().find("cannot serve job alone"), std::string::npos) << d->err();

  auto w = StartWorker({"--dispatcher", dispatcher});
  const std::string dump = dir_ / "indices.txt";
  auto c = consume("both", dump);
  const std::optional<int> rc = c->Wait(60);
  ASSERT_TRUE(rc.has_value()) << c->err();
  EXPECT_EQ(*rc, 0) << c->err();
  ExpectEachIndexOnce(ReadFile(dump), kSamples);
}

// Case 4, point to point: each worker lists the dataset itself, and two that saw
// different files each served their own epoch, silently (the check was off unless the
// client set a fingerprint). Now every batch says what its worker lists, and the
// client fails at once, naming both workers. One worker here runs in a mount
// namespace where the dataset's path shows another folder (5 files fewer a class).
TEST_F(FailureTest, PointToPointWorkersThatListOtherwiseAreCaught) {
  if (std::system("unshare -m true 2>/dev/null") != 0) GTEST_SKIP() << "cannot unshare a mount namespace (needs root)";
  TempDir other;
  MakeImageFolder(other.path(), kClasses, kPerClass - 5);
  std::string same, differs;
  auto w = StartWorker({}, &same);
  Child odd({"/usr/bin/unshare", "-m", "/bin/sh", "-c",
             "mount --bind '" + other.path() + "' '" + data_->path() + "' && exec '" + worker_bin_ +
                 "' --listen 127.0.0.1:0 --threads 1"},
            dir_ / "odd.out", dir_ / "odd.err");
  differs = WaitForListening(odd, "odd");
  Child c({consume_bin_, "--workers", same + "," + differs, "--data", data_->path(), "--pipeline", kSpecJson,
           "--batch-size", "4", "--epochs", "1", "--dump-indices", dir_ / "indices.txt"},
          dir_ / "c.out", dir_ / "c.err");
  const std::optional<int> rc = c.Wait(60);
  ASSERT_TRUE(rc.has_value()) << c.err();
  EXPECT_NE(*rc, 0) << "the client read an epoch from workers that list different files";
  EXPECT_NE(c.err().find("list the dataset differently"), std::string::npos) << c.err();
  EXPECT_NE(c.err().find(std::to_string(kClasses * (kPerClass - 5)) + " samples"), std::string::npos) << c.err();
  // Both workers seeing the same files: the epoch, once.
  std::string again;
  auto w2 = StartWorker({}, &again);
  ExpectAnEpochFrom(same + "," + again);
}

// Case 4: a job name reused after garbage collection. Workers cached a job's facts by
// name forever, so the new job was served with the old dataset. Now a worker opens a
// job again when the dispatcher names it with other settings.
TEST_F(FailureTest, AJobNameReusedAfterCollectionServesTheNewDataset) {
  TempDir other;
  MakeImageFolder(other.path(), 3, 7);  // 21 samples, where the first job had 60
  std::string dispatcher;
  auto d = StartDispatcher({}, &dispatcher);
  auto w = StartWorker({"--dispatcher", dispatcher});
  auto run = [&](const std::string& data, const std::string& dump) {
    Child c({consume_bin_, "--dispatcher", dispatcher, "--job", "reused", "--data", data, "--pipeline", kSpecJson,
             "--batch-size", "4", "--epochs", "1", "--dump-indices", dump},
            dump + ".out", dump + ".err");
    const std::optional<int> rc = c.Wait(60);
    EXPECT_TRUE(rc.has_value()) << c.err();
    EXPECT_EQ(rc.value_or(-1), 0) << c.err();
  };
  run(data_->path(), dir_ / "first.txt");
  ExpectEachIndexOnce(ReadFile(dir_ / "first.txt"), kSamples);
  ASSERT_TRUE(WaitFor([&] { return d->err().find("job reused finished") != std::string::npos; }, 20)) << d->err();
  run(other.path(), dir_ / "second.txt");
  ExpectEachIndexOnce(ReadFile(dir_ / "second.txt"), 21);
}

// Security: authentication is mutual. With a token, each side proves it holds it over
// both sides' nonces; a side with a token refuses a peer that does not ask for one or
// cannot prove it; and every refusal says why, on the side refused and in the log of
// the side refusing. It used to be one-way: a worker or a client with a token handed
// its work to whatever listened at the dispatcher's address.
TEST_F(FailureTest, AuthenticationIsMutualAndRefusalsSayWhy) {
  testing::WriteFile(dir_ / "token", "s3cret\n");
  testing::WriteFile(dir_ / "wrong", "guess\n");
  std::string guarded, open;
  auto d = StartDispatcher({"--token-file", dir_ / "token"}, &guarded);
  auto d_open = StartDispatcher({}, &open, "127.0.0.1:0", "journal-open");
  auto bad = StartWorker({"--dispatcher", guarded, "--token-file", dir_ / "wrong"});
  auto fooled = StartWorker({"--dispatcher", open, "--token-file", dir_ / "token"});
  constexpr auto npos = std::string::npos;
  EXPECT_TRUE(WaitFor([&] { return bad->err().find("wrong token") != npos; }, 20)) << bad->err();
  EXPECT_TRUE(WaitFor([&] { return fooled->err().find("does not ask for a token") != npos; }, 20)) << fooled->err();
  EXPECT_TRUE(WaitFor([&] { return d->err().find("wrong token") != npos; }, 20)) << d->err();

  auto consume = [&](const std::string& id, const std::string& dispatcher, const std::string& token_file) {
    std::vector<std::string> argv = {consume_bin_, "--dispatcher", dispatcher, "--job", "job", "--consumer-id", id,
                                     "--data", data_->path(), "--pipeline", kSpecJson, "--batch-size", "6",
                                     "--epochs", "1", "--dump-indices", dir_ / (id + ".txt")};
    if (!token_file.empty()) argv.insert(argv.end(), {"--token-file", token_file});
    return std::make_unique<Child>(argv, dir_ / (id + ".out"), dir_ / (id + ".err"));
  };
  {
    auto c = consume("fooled", open, dir_ / "token");
    const std::optional<int> rc = c->Wait(30);
    ASSERT_TRUE(rc.has_value()) << c->err();
    EXPECT_NE(*rc, 0);
    EXPECT_NE(c->err().find("does not ask for a token"), npos) << c->err();
  }
  {
    auto c = consume("wrong", guarded, dir_ / "wrong");
    const std::optional<int> rc = c->Wait(30);
    ASSERT_TRUE(rc.has_value()) << c->err();
    EXPECT_NE(*rc, 0);
    EXPECT_NE(c->err().find("wrong token"), npos) << c->err();
  }
  // The right token on both sides: the epoch, from the one worker that registered.
  auto good = StartWorker({"--dispatcher", guarded, "--token-file", dir_ / "token"});
  auto c = consume("good", guarded, dir_ / "token");
  const std::optional<int> rc = c->Wait(60);
  ASSERT_TRUE(rc.has_value()) << c->err();
  EXPECT_EQ(*rc, 0) << c->err();
  ExpectEachIndexOnce(ReadFile(dir_ / "good.txt"), kSamples);
  EXPECT_EQ(bad->err().find("registered with dispatcher"), npos) << bad->err();
  EXPECT_EQ(fooled->err().find("registered with dispatcher"), npos) << fooled->err();
  EXPECT_NE(good->err().find("registered with dispatcher"), npos) << good->err();
}

// Security: TLS, with mutual authentication. Daemons and clients with certificates of
// the cluster's CA stream an epoch exactly once (point to point and through the
// dispatcher); a client without a certificate, with one of another CA, trusting
// another CA, or with TLS against a worker without it, is refused at once (no retries)
// with OpenSSL's reason and a hint; the refusing daemon logs why.
TEST_F(FailureTest, TlsIsMutualAndRefusalsSayWhy) {
  const std::string pki = dir_ / "pki";
  ASSERT_EQ(std::system((std::string(FERRY_MAKE_CERTS) + " " + pki).c_str()), 0) << "make_certs.sh failed";
  const std::vector<std::string> tls = {"--tls-cert", pki + "/server.pem", "--tls-key", pki + "/server.key",
                                        "--tls-ca", pki + "/ca.pem"};
  std::string dispatcher, worker, plain;
  auto d = StartDispatcher(tls, &dispatcher);
  std::vector<std::string> wargs = tls;
  wargs.insert(wargs.end(), {"--dispatcher", dispatcher});
  auto w = StartWorker(wargs, &worker);
  auto p = StartWorker({}, &plain);
  constexpr auto npos = std::string::npos;
  EXPECT_TRUE(WaitFor([&] { return w->err().find("registered with dispatcher") != npos; }, 20)) << w->err();

  auto consume = [&](const std::string& id, std::vector<std::string> where, const std::string& cert,
                     const std::string& ca) {
    std::vector<std::string> argv = {consume_bin_, "--data", data_->path(), "--pipeline", kSpecJson, "--batch-size",
                                     "6", "--epochs", "1", "--dump-indices", dir_ / (id + ".txt"), "--consumer-id", id};
    argv.insert(argv.end(), where.begin(), where.end());
    if (!ca.empty()) argv.insert(argv.end(), {"--tls-ca", pki + "/" + ca + ".pem"});
    if (!cert.empty()) argv.insert(argv.end(), {"--tls-cert", pki + "/" + cert + ".pem", "--tls-key", pki + "/" + cert + ".key"});
    return std::make_unique<Child>(argv, dir_ / (id + ".out"), dir_ / (id + ".err"));
  };
  auto refused = [&](const std::string& id, std::vector<std::string> where, const std::string& cert,
                     const std::string& ca, const std::string& why) {
    auto c = consume(id, where, cert, ca);
    const std::optional<int> rc = c->Wait(30);
    ASSERT_TRUE(rc.has_value()) << id << " did not give up: " << c->err();
    EXPECT_NE(*rc, 0) << id;
    EXPECT_NE(c->err().find("Unauthenticated"), npos) << id << ": " << c->err();
    EXPECT_NE(c->err().find(why), npos) << id << ": " << c->err();
  };
  const std::vector<std::string> by_name = {"--dispatcher", dispatcher, "--job", "job"};
  refused("no-cert", by_name, "", "ca", "certificate required");
  refused("rogue-cert", by_name, "rogue", "ca", "not signed by the peer's --tls-ca");
  refused("rogue-ca", by_name, "client", "rogue-ca", "not signed by our --tls-ca");
  refused("rogue-p2p", {"--workers", worker}, "rogue", "ca", "not signed by the peer's --tls-ca");
  refused("tls-to-plain", {"--workers", plain}, "client", "ca", "does not speak TLS");
  EXPECT_NE(d->err().find("certificate verify failed"), npos) << d->err();
  EXPECT_NE(w->err().find("certificate verify failed"), npos) << w->err();
  {
    // A plain client of a TLS worker: the worker waits for a TLS hello, the client for
    // the worker's challenge, until the worker's handshake timeout closes it. The
    // client's retries end with a hint rather than a bare "end of file".
    std::vector<std::string> quick = tls;
    quick.insert(quick.end(), {"--handshake-timeout", "0.3"});
    std::string tls_only;
    auto q = StartWorker(quick, &tls_only);
    auto c = consume("plain-to-tls", {"--workers", tls_only}, "", "");
    const std::optional<int> rc = c->Wait(40);
    ASSERT_TRUE(rc.has_value()) << "a plain client of a TLS worker did not give up: " << c->err();
    EXPECT_NE(*rc, 0);
    EXPECT_NE(c->err().find("if it serves TLS"), npos) << c->err();
  }

  for (const auto& [id, where] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"p2p", {"--workers", worker}}, {"named", by_name}}) {
    auto c = consume(id, where, "client", "ca");
    const std::optional<int> rc = c->Wait(60);
    ASSERT_TRUE(rc.has_value()) << c->err();
    EXPECT_EQ(*rc, 0) << id << ": " << c->err();
    ExpectEachIndexOnce(ReadFile(dir_ / (id + ".txt")), kSamples);
  }
}

}  // namespace
}  // namespace ferry
