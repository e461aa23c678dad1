// libFuzzer target for the dispatcher's control plane: the requests a dispatcher
// session takes from authenticated peers (RegisterWorker, Heartbeat, GetOrCreateJob,
// GetWorkers, AckSplits, GetJobStatus, RestoreConsumer, ReportWorker, DrainWorker), in any order
// and with any arguments, with time passing, ticks, and restarts in between, all
// against a real Dispatcher (lib/dispatch/dispatcher.h) journaling into a real work
// dir. The input is a program: each step picks a request and its fields from a small
// alphabet of workers, jobs and consumers (so that requests meet each other's state),
// or, one step in eight, hands raw bytes to that request's decoder and whatever
// decodes to the dispatcher. Structured requests go through their encoder and decoder
// first, as on the wire.
//
// Checked after every step: the state's own invariants (counters agree with the
// splits and the lease index, a leased split's worker exists, an assigned split of a ranked job belongs
// to its rank, open epochs are not before first_open, a worker is told only of its
// own leases); every reply encodes within the control plane's frame limit; and at
// every restart (and at the end) a dispatcher reopened from the work dir, after a
// sync, holds the same state (DispatcherState::DebugString), whatever compactions
// happened. Crashes, leaks and undefined behaviour are ASan's and UBSan's.
//
//   dispatcher_fuzzer --write-seeds DIR   writes a few seed programs and exits
//   dispatcher_fuzzer [libFuzzer flags] CORPUS...   (see tests/fuzz/run.sh)
#include <fuzzer/FuzzedDataProvider.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/log.h"
#include "dispatch/dispatcher.h"
#include "fuzz_util.h"
#include "wire/control.h"

namespace {

using namespace ferry;             // NOLINT
using namespace ferry::dispatch;   // NOLINT
using ferry::fuzz::BodyFrame;
using ferry::fuzz::Received;

std::string& WorkDir() {
  static std::string dir;
  return dir;
}

const char* const kWorkers[] = {"w0", "w1", "w2", "w3"};
const char* const kJobs[] = {"j0", "j1", "j2"};
const char* const kConsumers[] = {"c0", "c1", "rank-0", "rank-1", "rank-2", ""};

template <size_t N>
std::string Pick(FuzzedDataProvider& p, const char* const (&from)[N]) {
  return from[p.ConsumeIntegralInRange<size_t>(0, N - 1)];
}

std::string Address(const std::string& worker) { return "10.0.0.1:" + std::to_string(7000 + worker.back()); }

// Mostly small epochs and splits (that exist); sometimes anything.
SplitId PickSplit(FuzzedDataProvider& p) {
  if (p.ConsumeIntegralInRange(0, 15) == 0) return {p.ConsumeIntegral<uint64_t>(), p.ConsumeIntegral<int64_t>()};
  return {p.ConsumeIntegralInRange<uint64_t>(0, 4), p.ConsumeIntegralInRange<int64_t>(-1, 40)};
}

std::vector<SplitId> PickSplits(FuzzedDataProvider& p) {
  std::vector<SplitId> out(p.ConsumeIntegralInRange<size_t>(0, 12));
  for (auto& s : out) s = PickSplit(p);
  return out;
}

wire::GetOrCreateJobMsg PickJob(FuzzedDataProvider& p) {
  wire::GetOrCreateJobMsg m;
  m.job.name = Pick(p, kJobs);
  JobSpec& j = m.job.job;
  j.dataset = "/data/" + m.job.name;
  // Pipelines travel as JSON and are compiled at every join, which was most of a
  // program's time with the default (its float parameters): one op each, and the
  // jobs' pipelines differ (j2 has a crop). Chosen by name, taking no bytes, so that
  // the corpus and the regressions decode as before.
  j.pipeline = m.job.name == "j2" ? PipelineSpec().Add("random_resized_crop", R"({"size":224})")
                                  : PipelineSpec().Add("hflip");
  j.seed = p.ConsumeIntegralInRange<uint64_t>(0, 1);
  j.batch_size = p.ConsumeIntegralInRange<int32_t>(1, 8);
  j.batches_per_split = p.ConsumeIntegralInRange<int32_t>(1, 3);
  j.epochs = p.ConsumeIntegralInRange<int64_t>(-1, 3);
  j.last_batch = static_cast<LastBatch>(p.ConsumeIntegralInRange(0, 2));
  j.mode = static_cast<ProcessingMode>(p.ConsumeIntegralInRange(0, 1));
  j.ordering = static_cast<Ordering>(p.ConsumeIntegralInRange(0, 1));
  j.num_consumers = p.ConsumeIntegralInRange<int32_t>(0, 3);
  j.first_epoch = p.ConsumeIntegralInRange(0, 7) == 0 ? p.ConsumeIntegralInRange<uint64_t>(0, 3) : 0;
  if (p.ConsumeIntegralInRange(0, 7) == 0) {
    const int64_t a = p.ConsumeIntegralInRange<int64_t>(0, 40);
    j.taken = {{a, a + p.ConsumeIntegralInRange<int64_t>(0, 20)}};
  }
  m.consumer_id = Pick(p, kConsumers);
  m.fresh = p.ConsumeBool();
  return m;
}

// Structured requests travel as they would on the wire. The decoder may refuse what
// the encoder wrote (it checks what a peer could send, e.g. a hybrid worker naming a
// job but no consumer): then with InvalidArgument, and the step does nothing.
template <typename Msg, typename Enc, typename Dec>
Result<Msg> OverTheWire(const Msg& m, Enc encode, Dec decode) {
  Result<Msg> back = decode(Received(encode(m)));
  if (!back.ok()) FUZZ_CHECK(back.status().code() == StatusCode::kInvalidArgument);
  return back;
}

// A reply the service would send: it must fit the peer's frame limit (1 MiB).
void CheckSendable(const wire::OutFrame& f) {
  FUZZ_CHECK(f.size() <= wire::kFrameHeaderSize + wire::FrameLimits{}.max_control_bytes);
}

void CheckStatus(const Status& s) {
  // The dispatcher refuses with the codes a client acts on; never Internal.
  FUZZ_CHECK(s.code() != StatusCode::kInternal);
}

void CheckInvariants(const DispatcherState& st) {
  // The lease index (what heartbeats read) is the splits' own account.
  if (std::string diff = st.CheckLeaseIndex(); !diff.empty()) {
    std::fprintf(stderr, "%s\n", diff.c_str());
    FUZZ_CHECK(false);
  }
  for (const auto& [name, j] : st.jobs()) {
    FUZZ_CHECK(name == j.name);
    for (const auto& [e, ep] : j.epochs) {
      FUZZ_CHECK(e >= j.first_open);
      FUZZ_CHECK(ep.worker.size() == ep.status.size() && ep.consumer.size() == ep.status.size());
      int64_t done = 0, leased = 0;
      for (size_t s = 0; s < ep.status.size(); ++s) {
        if (ep.status[s] == SplitStatus::kDone) ++done;
        if (ep.status[s] == SplitStatus::kLeased) {
          ++leased;
          FUZZ_CHECK(st.workers().count(ep.worker[s]) == 1);
        } else {
          FUZZ_CHECK(ep.worker[s].empty());
        }
        if (j.spec.ranked() && !ep.consumer[s].empty())
          FUZZ_CHECK(ep.consumer[s] == RankConsumer(j.spec.SplitRank(int64_t(s))));
      }
      FUZZ_CHECK(done == ep.done && leased == ep.leased);
    }
  }
}

struct Run {
  DispatcherConfig config;
  std::unique_ptr<Dispatcher> d;
  int64_t now = 0;

  void Open() {
    auto opened = Dispatcher::Open(config, now);
    if (!opened.ok()) std::fprintf(stderr, "dispatcher_fuzzer: %s\n", opened.status().ToString().c_str());
    FUZZ_CHECK(opened.ok());
    d = std::move(*opened);
  }

  // Sync, close, reopen from the work dir: the same state.
  void Restart() {
    FUZZ_CHECK(d->Sync().ok());
    const std::string before = d->state().DebugString();
    d.reset();
    Open();
    const std::string after = d->state().DebugString();
    if (before != after)
      std::fprintf(stderr, "dispatcher_fuzzer: replay differs\n--- before\n%s--- after\n%s", before.c_str(),
                   after.c_str());
    FUZZ_CHECK(before == after);
  }

  void Heartbeat(const wire::HeartbeatMsg& m) {
    auto r = d->Heartbeat(m, now);
    if (!r.ok()) return CheckStatus(r.status());
    CheckSendable(wire::EncodeHeartbeatOk(*r));
    // A worker is told of its own leases only, each once.
    std::set<std::tuple<std::string, uint64_t, int64_t>> seen;
    const auto held = d->state().LeasesOf(m.worker_id);
    for (const wire::LeaseMsg& l : r->leases) {
      FUZZ_CHECK(seen.insert({l.job, l.epoch, l.split}).second);
      bool found = false;
      auto it = held.find(l.job);
      if (it != held.end())
        for (const LeasedSplit& h : it->second) found = found || (h.ref.epoch == l.epoch && h.ref.split == l.split);
      FUZZ_CHECK(found);
    }
  }

  void Join(const wire::GetOrCreateJobMsg& m, FuzzedDataProvider& p) {
    auto join = d->GetOrCreateJob(m);
    if (!join.ok()) return CheckStatus(join.status());
    if (join->kind == Dispatcher::JoinResult::kJoined) return CheckSendable(wire::EncodeJobInfo(join->job));
    if (join->kind != Dispatcher::JoinResult::kNeedsListing) return;
    // The listing, as the service's blocking pool would report it.
    Result<JobSpec> listed = Status::NotFound("no such dataset: " + m.job.job.dataset);
    if (p.ConsumeIntegralInRange(0, 7) != 0) {
      JobSpec s = m.job.job;
      s.num_samples = p.ConsumeIntegralInRange<int64_t>(0, 64);
      s.fingerprint = 1000 + s.num_samples;
      listed = s;
    }
    auto created = d->CreateJob(m, listed);
    if (!created.ok()) return CheckStatus(created.status());
    d->ConsumerSeen(m.job.name, m.consumer_id, now);
    CheckSendable(wire::EncodeJobInfo(*created));
  }

  void OnJobStatus(const Result<wire::JobStatusMsg>& r) {
    if (!r.ok()) return CheckStatus(r.status());
    CheckSendable(wire::EncodeJobStatus(*r));
    for (size_t i = 1; i < r->my_splits.size(); ++i) FUZZ_CHECK(r->my_splits[i - 1] < r->my_splits[i]);
  }

  void Ack(const wire::AckSplitsMsg& m) {
    d->ConsumerSeen(m.job, m.consumer_id, now);
    OnJobStatus(d->AckSplits(m));
  }
  void GetStatus(const wire::GetJobStatusMsg& m) {
    d->ConsumerSeen(m.job, m.consumer_id, now);
    OnJobStatus(d->GetJobStatus(m));
  }
  void Restore(const wire::RestoreConsumerMsg& m) {
    d->ConsumerSeen(m.job, m.consumer_id, now);
    OnJobStatus(d->RestoreConsumer(m));
  }
  void Register(const wire::RegisterWorkerMsg& m) {
    auto r = d->RegisterWorker(m, now);
    if (!r.ok()) CheckStatus(r.status());
  }

  // Raw bytes to the decoder of a request; what decodes goes in.
  void Raw(FuzzedDataProvider& p) {
    const int which = p.ConsumeIntegralInRange(0, 7);
    const std::string bytes = p.ConsumeBytesAsString(p.ConsumeIntegralInRange<size_t>(0, 512));
    const std::string body = bytes.substr(0, bytes.size() / 8 * 8);
    switch (which) {
      case 0:
        if (auto m = wire::DecodeRegisterWorker(BodyFrame(wire::MessageType::kRegisterWorker, body.data(), body.size())); m.ok())
          Register(*m);
        break;
      case 1:
        if (auto m = wire::DecodeHeartbeat(BodyFrame(wire::MessageType::kHeartbeat, body.data(), body.size())); m.ok())
          Heartbeat(*m);
        break;
      case 2:
        if (auto m = wire::DecodeGetOrCreateJob(BodyFrame(wire::MessageType::kGetOrCreateJob, body.data(), body.size()));
            m.ok())
          Join(*m, p);
        break;
      case 3:
        if (auto m = wire::DecodeGetWorkersMsg(BodyFrame(wire::MessageType::kGetWorkers, body.data(), body.size())); m.ok()) {
          d->ConsumerSeen(m->job, m->consumer_id, now);
          CheckSendable(wire::EncodeWorkerList(d->Workers(m->job, m->consumer_id)));
        }
        break;
      case 4:
        if (auto m = wire::DecodeAckSplits(BodyFrame(wire::MessageType::kAckSplits, body.data(), body.size())); m.ok())
          Ack(*m);
        break;
      case 5:
        if (auto m = wire::DecodeGetJobStatus(BodyFrame(wire::MessageType::kGetJobStatus, body.data(), body.size())); m.ok())
          GetStatus(*m);
        break;
      case 6:
        if (auto m = wire::DecodeRestoreConsumer(BodyFrame(wire::MessageType::kRestoreConsumer, body.data(), body.size()));
            m.ok())
          Restore(*m);
        break;
      default:
        if (auto m = wire::DecodeReportWorker(BodyFrame(wire::MessageType::kReportWorker, body.data(), body.size())); m.ok())
          CheckSendable(wire::EncodeWorkerList(d->ReportWorker(*m, now)));
        break;
    }
  }

  void Step(FuzzedDataProvider& p) {
    now += p.ConsumeIntegralInRange<int64_t>(0, 700);
    switch (p.ConsumeIntegralInRange(0, 15)) {
      case 0: {
        wire::RegisterWorkerMsg m;
        m.worker_id = Pick(p, kWorkers);
        m.address = Address(m.worker_id);
        if (p.ConsumeIntegralInRange(0, 5) == 0) {
          m.serves_job = Pick(p, kJobs);
          m.serves_consumer = Pick(p, kConsumers);
        }
        if (auto w = OverTheWire(m, wire::EncodeRegisterWorker, wire::DecodeRegisterWorker); w.ok()) Register(*w);
        return;
      }
      case 1:
      case 2:
      case 3: {
        wire::HeartbeatMsg m;
        m.worker_id = Pick(p, kWorkers);
        m.draining = p.ConsumeIntegralInRange(0, 7) == 0;
        m.want_leases = p.ConsumeIntegralInRange(0, 5) != 0;
        m.leaving = p.ConsumeIntegralInRange(0, 15) == 0;
        if (p.ConsumeBool()) m.want_jobs = {Pick(p, kJobs)};
        if (p.ConsumeIntegralInRange(0, 5) == 0) m.unfit_jobs[Pick(p, kJobs)] = "its dataset is missing";
        if (auto w = OverTheWire(m, wire::EncodeHeartbeat, wire::DecodeHeartbeat); w.ok()) Heartbeat(*w);
        return;
      }
      case 4:
        if (auto w = OverTheWire(PickJob(p), wire::EncodeGetOrCreateJob, wire::DecodeGetOrCreateJob); w.ok()) Join(*w, p);
        return;
      case 5: {
        wire::GetWorkersMsg m{Pick(p, kJobs), Pick(p, kConsumers)};
        auto w = OverTheWire(m, wire::EncodeGetWorkers, wire::DecodeGetWorkersMsg);
        if (!w.ok()) return;
        m = *w;
        d->ConsumerSeen(m.job, m.consumer_id, now);
        return CheckSendable(wire::EncodeWorkerList(d->Workers(m.job, m.consumer_id)));
      }
      case 6:
      case 7:
      case 8: {
        wire::AckSplitsMsg m{Pick(p, kJobs), Pick(p, kConsumers), {}};
        if (p.ConsumeBool()) {
          // Ack what the consumer was assigned: the common case, which moves epochs.
          const JobState* j = d->state().job(m.job);
          if (j != nullptr)
            for (const auto& [e, ep] : j->epochs)
              for (size_t s = 0; s < ep.status.size(); ++s)
                if (ep.consumer[s] == m.consumer_id && p.ConsumeBool()) m.splits.push_back({e, int64_t(s)});
        } else {
          m.splits = PickSplits(p);
        }
        if (auto w = OverTheWire(m, wire::EncodeAckSplits, wire::DecodeAckSplits); w.ok()) Ack(*w);
        return;
      }
      case 9: {
        wire::GetJobStatusMsg m{Pick(p, kJobs), Pick(p, kConsumers), p.ConsumeIntegralInRange<uint64_t>(0, 4)};
        if (auto w = OverTheWire(m, wire::EncodeGetJobStatus, wire::DecodeGetJobStatus); w.ok()) GetStatus(*w);
        return;
      }
      case 10: {
        wire::RestoreConsumerMsg m{Pick(p, kJobs), Pick(p, kConsumers), p.ConsumeIntegralInRange<uint64_t>(0, 4),
                                   PickSplits(p)};
        if (auto w = OverTheWire(m, wire::EncodeRestoreConsumer, wire::DecodeRestoreConsumer); w.ok()) Restore(*w);
        return;
      }
      case 11: {
        const std::string a = p.ConsumeBool() ? Address(Pick(p, kWorkers)) : "10.9.9.9:1";
        auto back = OverTheWire(a, wire::EncodeReportWorker, wire::DecodeReportWorker);
        if (back.ok()) CheckSendable(wire::EncodeWorkerList(d->ReportWorker(*back, now)));
        return;
      }
      case 12: {
        std::set<std::string> in_use;
        for (const char* j : kJobs)
          if (p.ConsumeBool()) in_use.insert(j);
        d->Tick(now, in_use);
        return;
      }
      case 13: {
        const int what = p.ConsumeIntegralInRange(0, 3);
        if (what == 0) return Restart();
        if (what == 1) {
          // An operator drains a worker (ferry-ctl drain), by id or address. Takes no
          // bytes of its own, so that programs written before it decode as they did.
          const std::string w = kWorkers[now % 4];
          auto back = OverTheWire(now % 2 ? w : Address(w), wire::EncodeDrainWorker, wire::DecodeDrainWorker);
          if (back.ok()) {
            auto r = d->DrainWorker(*back, now);
            if (r.ok()) CheckSendable(wire::EncodeClusterStatus(*r));
            else
              FUZZ_CHECK(r.status().code() == StatusCode::kNotFound ||
                         r.status().code() == StatusCode::kFailedPrecondition || !d->journal_healthy());
          }
        }
        FUZZ_CHECK(d->Sync().ok());
        return;
      }
      default:
        return Raw(p);
    }
  }
};

// Seeds: byte strings that FuzzedDataProvider turns into programs. Random programs
// of a few hundred bytes already create jobs, register workers and lease (every
// choice is from a small range); a few of different lengths give the fuzzer a start.
void WriteSeeds(const std::string& dir) {
  ::mkdir(dir.c_str(), 0755);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 16; ++i) {
    std::vector<uint8_t> bytes(size_t(64) << (i % 5));
    for (auto& b : bytes) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b = uint8_t(x);
    }
    ferry::fuzz::WriteSeed(dir, "program" + std::to_string(i), bytes.data(), bytes.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i + 1 < *argc; ++i) {
    if (std::strcmp((*argv)[i], "--write-seeds") == 0) {
      WriteSeeds((*argv)[i + 1]);
      std::exit(0);
    }
  }
  // The dispatcher logs replays and removals: not wanted a million times.
  // FERRY_FUZZ_LOG=debug (or info...) shows them, to follow one input.
  if (const char* level = std::getenv("FERRY_FUZZ_LOG"); level != nullptr && ferry::ParseLogLevel(level))
    ferry::SetLogLevel(*ferry::ParseLogLevel(level));
  else
    ferry::SetLogQuiet(true);
  // A work dir on tmpfs when there is one: each input opens, syncs and reopens it.
  const char* base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  std::string tmpl = std::string(base) + "/ferry-dispatcher-fuzz-XXXXXX";
  FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr);
  WorkDir() = tmpl;
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(WorkDir(), ec);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(WorkDir(), ec)) std::filesystem::remove_all(e.path(), ec);
  Run run;
  run.config.work_dir = WorkDir();
  run.config.heartbeat_interval_ms = 100;
  run.config.heartbeat_timeout_ms = 1000;
  run.config.consumer_timeout_ms = 3000;
  run.config.lease.max_outstanding = p.ConsumeIntegralInRange(1, 4);
  run.config.compact_every = p.ConsumeIntegralInRange<uint64_t>(2, 40);  // compactions happen
  run.config.sync = false;
  run.Open();
  for (int steps = 0; p.remaining_bytes() > 0 && steps < 400; ++steps) {
    run.Step(p);
    CheckInvariants(run.d->state());
  }
  run.Restart();
  CheckInvariants(run.d->state());
  return 0;
}
