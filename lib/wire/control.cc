// The control plane's codec (schemas/control.capnp).
#include "wire/control.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "control.capnp.h"
#include "wire/decode.h"
#include "wire/job_codec.h"

namespace ferry::wire {

namespace ctl = ::ferry::schema;
using codec::Build;
using codec::Decode;
using codec::Str;

namespace {

void PutNamedJob(ctl::NamedJob::Builder b, const NamedJob& j) {
  b.setName(j.name);
  codec::PutJob(b.initJob(), j.job, j.pipeline_json.get());
  b.setDigest(j.digest);
}

Result<NamedJob> GetNamedJob(ctl::NamedJob::Reader r) {
  NamedJob j;
  j.name = Str(r.getName());
  FERRY_ASSIGN_OR_RETURN(j.job, codec::GetJob(r.getJob()));
  j.digest = r.getDigest();
  return j;
}

// Packed split sets: splits per epoch the dispatcher tracks at most, and how far a
// split number may go (state.h's kMaxSplitsPerEpoch is 2^22; anything past this is
// refused by the state anyway).
constexpr size_t kMaxPackedSplits = size_t(1) << 22;
constexpr int64_t kMaxPackedSplit = int64_t(1) << 40;

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out->push_back(char(v));
}

bool GetVarint(const uint8_t*& p, const uint8_t* end, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p == end) return false;
    const uint8_t b = *p++;
    *v |= uint64_t(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return shift < 63 || b <= 1;
  }
  return false;
}

}  // namespace

std::optional<std::string> PackSplitSet(const std::vector<int64_t>& s) {
  std::string out;
  int64_t prev = -1;
  for (size_t i = 0; i < s.size();) {
    if (s[i] <= prev || s[i] > kMaxPackedSplit) return std::nullopt;
    size_t j = i + 1;
    int64_t step = 1;
    if (j < s.size() && s[j] > s[i] && s[j] <= kMaxPackedSplit) {
      step = s[j] - s[i];
      // (Both in [0, kMaxPackedSplit] before subtracting: no overflow on hostile input.)
      while (j < s.size() && s[j] > s[j - 1] && s[j] <= kMaxPackedSplit && s[j] - s[j - 1] == step) ++j;
    }
    PutVarint(&out, uint64_t(s[i] - prev - 1));
    PutVarint(&out, uint64_t(step - 1));
    PutVarint(&out, uint64_t(j - i - 1));
    prev = s[j - 1];
    i = j;
  }
  return out;
}

Result<std::vector<int64_t>> UnpackSplitSet(const void* data, size_t size, size_t max_count, int64_t max_split) {
  std::vector<int64_t> out;
  const auto* p = static_cast<const uint8_t*>(data);
  const uint8_t* end = p + size;
  int64_t prev = -1;
  while (p != end) {
    uint64_t gap, step, count;
    if (!GetVarint(p, end, &gap) || !GetVarint(p, end, &step) || !GetVarint(p, end, &count))
      return Status::InvalidArgument("packed splits: truncated");
    // Bounds before arithmetic: every value stays within [0, max_split].
    if (out.size() >= max_count || count >= max_count - out.size())
      return Status::InvalidArgument("packed splits: more than " + std::to_string(max_count));
    if (gap > uint64_t(max_split) || step >= uint64_t(max_split) || prev + 1 + int64_t(gap) > max_split ||
        int64_t(count) * int64_t(step + 1) > max_split - (prev + 1 + int64_t(gap)))
      return Status::InvalidArgument("packed splits: a split number out of range");
    const int64_t first = prev + 1 + int64_t(gap);
    for (uint64_t k = 0; k <= count; ++k) out.push_back(first + int64_t(k * (step + 1)));
    prev = out.back();
  }
  return out;
}

OutFrame EncodeRegisterWorker(const RegisterWorkerMsg& m) {
  return Build(MessageType::kRegisterWorker, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<ctl::RegisterWorker>();
    r.setWorkerId(m.worker_id);
    r.setAddress(m.address);
    r.setServesJob(m.serves_job);
    r.setServesConsumer(m.serves_consumer);
  });
}

OutFrame EncodeRegisterWorkerOk(uint32_t interval_ms) {
  return Build(MessageType::kRegisterWorkerOk, [&](capnp::MessageBuilder& b) {
    b.initRoot<ctl::RegisterWorkerOk>().setHeartbeatIntervalMs(interval_ms);
  });
}

namespace {

void SetLoad(ctl::ConsumerLoad::Builder b, const ConsumerLoad& l) {
  b.setWaitNs(l.wait_ns);
  b.setElapsedNs(l.elapsed_ns);
  b.setSamples(l.samples);
}
ConsumerLoad GetLoad(ctl::ConsumerLoad::Reader r) { return {r.getWaitNs(), r.getElapsedNs(), r.getSamples()}; }

}  // namespace

OutFrame EncodeHeartbeat(const HeartbeatMsg& m) {
  return Build(MessageType::kHeartbeat, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<ctl::Heartbeat>();
    r.setWorkerId(m.worker_id);
    r.setDraining(m.draining);
    r.setWantLeases(m.want_leases);
    r.setLeaving(m.leaving);
    auto want = r.initWantJobs(unsigned(m.want_jobs.size()));
    for (unsigned i = 0; i < m.want_jobs.size(); ++i) want.set(i, m.want_jobs[i]);
    auto unfit = r.initUnfitJobs(unsigned(m.unfit_jobs.size()));
    unsigned i = 0;
    for (const auto& [name, reason] : m.unfit_jobs) {
      unfit[i].setName(name);
      unfit[i].setReason(reason);
      ++i;
    }
    auto load = r.initLoad();
    load.setSamples(m.load.samples);
    load.setBusyNs(m.load.busy_ns);
    load.setReadNs(m.load.read_ns);
    load.setDecodeNs(m.load.decode_ns);
    load.setAugmentNs(m.load.augment_ns);
    auto ops = load.initOps(unsigned(std::min(m.load.ops.size(), WorkerLoad::kMaxOpCosts)));
    for (unsigned k = 0; k < ops.size(); ++k) {
      ops[k].setName(m.load.ops[k].name);
      ops[k].setNs(m.load.ops[k].ns);
      ops[k].setSamples(m.load.ops[k].samples);
    }
    auto jobs = load.initJobs(unsigned(std::min(m.load.jobs.size(), WorkerLoad::kMaxJobs)));
    for (unsigned k = 0; k < jobs.size(); ++k) {
      jobs[k].setName(m.load.jobs[k].name);
      jobs[k].setBusyNs(m.load.jobs[k].ns);
    }
    auto have = r.initHaveJobs(unsigned(std::min(m.have_jobs.size(), WorkerLoad::kMaxJobs)));
    unsigned h = 0;
    for (const auto& [name, digest] : m.have_jobs) {
      if (h == have.size()) break;
      have[h].setName(name);
      have[h].setDigest(digest);
      ++h;
    }
  });
}

OutFrame EncodeHeartbeatOk(const HeartbeatOkMsg& m) {
  return Build(MessageType::kHeartbeatOk, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<ctl::HeartbeatOk>();
    auto leases = r.initLeases(unsigned(m.leases.size()));
    for (unsigned i = 0; i < m.leases.size(); ++i) {
      leases[i].setJob(m.leases[i].job);
      leases[i].setEpoch(m.leases[i].epoch);
      leases[i].setSplit(m.leases[i].split);
      leases[i].setConsumer(m.leases[i].consumer);
    }
    auto jobs = r.initJobs(unsigned(m.jobs.size()));
    for (unsigned i = 0; i < m.jobs.size(); ++i) PutNamedJob(jobs[i], m.jobs[i]);
    r.setKnown(m.known);
    r.setNewLeases(m.new_leases);
    r.setIdle(m.idle);
    r.setDrain(m.drain);
    auto gone = r.initGoneJobs(unsigned(m.gone_jobs.size()));
    for (unsigned i = 0; i < m.gone_jobs.size(); ++i) gone.set(i, m.gone_jobs[i]);
    auto same = r.initSameJobs(unsigned(m.same_jobs.size()));
    for (unsigned i = 0; i < m.same_jobs.size(); ++i) same.set(i, m.same_jobs[i]);
  });
}

OutFrame EncodeGetOrCreateJob(const GetOrCreateJobMsg& m) {
  return Build(MessageType::kGetOrCreateJob, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<ctl::GetOrCreateJob>();
    PutNamedJob(r.initJob(), m.job);
    r.setConsumerId(m.consumer_id);
    r.setFresh(m.fresh);
  });
}

OutFrame EncodeJobInfo(const NamedJob& job) {
  return Build(MessageType::kJobInfo,
               [&](capnp::MessageBuilder& b) { PutNamedJob(b.initRoot<ctl::JobInfo>().initJob(), job); });
}

OutFrame EncodeGetWorkers(const GetWorkersMsg& m) {
  return Build(MessageType::kGetWorkers, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<ctl::GetWorkers>();
    r.setJob(m.job);
    r.setConsumerId(m.consumer_id);
  });
}

OutFrame EncodeWorkerList(const std::vector<std::string>& addresses) {
  return Build(MessageType::kWorkerList, [&](capnp::MessageBuilder& b) {
    auto l = b.initRoot<ctl::WorkerList>().initAddresses(unsigned(addresses.size()));
    for (unsigned i = 0; i < addresses.size(); ++i) l.set(i, addresses[i]);
  });
}

OutFrame EncodeAckSplits(const AckSplitsMsg& m) {
  return Build(MessageType::kAckSplits, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<ctl::AckSplits>();
    r.setJob(m.job);
    r.setConsumerId(m.consumer_id);
    auto l = r.initSplits(unsigned(m.splits.size()));
    for (unsigned i = 0; i < m.splits.size(); ++i) {
      l[i].setEpoch(m.splits[i].epoch);
      l[i].setSplit(m.splits[i].split);
    }
    SetLoad(r.initLoad(), m.load);
  });
}

OutFrame EncodeGetJobStatus(const GetJobStatusMsg& m) {
  return Build(MessageType::kGetJobStatus, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<ctl::GetJobStatus>();
    r.setJob(m.job);
    r.setConsumerId(m.consumer_id);
    r.setEpoch(m.epoch);
    SetLoad(r.initLoad(), m.load);
  });
}

OutFrame EncodeJobStatus(const JobStatusMsg& m) {
  return Build(MessageType::kJobStatus, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<ctl::JobStatus>();
    r.setFirstOpen(m.first_open);
    r.setFinished(m.finished);
    if (std::optional<std::string> packed = PackSplitSet(m.my_splits)) {
      r.setMySplitsPacked(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(packed->data()), packed->size()));
    } else {
      auto l = r.initMySplits(unsigned(m.my_splits.size()));
      for (unsigned i = 0; i < m.my_splits.size(); ++i) l.set(i, m.my_splits[i]);
    }
    r.setEpochFullyAssigned(m.epoch_fully_assigned);
  });
}

Result<RegisterWorkerMsg> DecodeRegisterWorker(const InFrame& f) {
  return Decode<ctl::RegisterWorker>(f, MessageType::kRegisterWorker,
                                     [](ctl::RegisterWorker::Reader r) -> Result<RegisterWorkerMsg> {
                                       if (r.getWorkerId().size() == 0) return Status::InvalidArgument("RegisterWorker: empty id");
                                       RegisterWorkerMsg m{Str(r.getWorkerId()), Str(r.getAddress()),
                                                           Str(r.getServesJob()), Str(r.getServesConsumer())};
                                       if (m.serves_job.empty() != m.serves_consumer.empty())
                                         return Status::InvalidArgument(
                                             "RegisterWorker: servesJob and servesConsumer go together");
                                       return m;
                                     });
}

Result<uint32_t> DecodeRegisterWorkerOk(const InFrame& f) {
  return Decode<ctl::RegisterWorkerOk>(f, MessageType::kRegisterWorkerOk,
                                       [](ctl::RegisterWorkerOk::Reader r) -> Result<uint32_t> { return r.getHeartbeatIntervalMs(); });
}

Result<HeartbeatMsg> DecodeHeartbeat(const InFrame& f) {
  return Decode<ctl::Heartbeat>(f, MessageType::kHeartbeat, [](ctl::Heartbeat::Reader r) -> Result<HeartbeatMsg> {
    HeartbeatMsg m{Str(r.getWorkerId()), r.getDraining(), r.getWantLeases(), r.getLeaving(), {}, {}};
    for (auto j : r.getWantJobs()) m.want_jobs.push_back(Str(j));
    for (auto u : r.getUnfitJobs()) m.unfit_jobs[Str(u.getName())] = Str(u.getReason());
    auto l = r.getLoad();
    m.load = {l.getSamples(), l.getBusyNs(), l.getReadNs(), l.getDecodeNs(), l.getAugmentNs(), {}};
    const auto ops = l.getOps();  // read each pointer once: traversal counts every read
    if (ops.size() > WorkerLoad::kMaxOpCosts)
      return Status::InvalidArgument("Heartbeat: more than " + std::to_string(WorkerLoad::kMaxOpCosts) + " op costs");
    for (auto o : ops) {
      const auto name = o.getName();
      if (name.size() > 64) return Status::InvalidArgument("Heartbeat: an op name over 64 bytes");
      m.load.ops.push_back({Str(name), o.getNs(), o.getSamples()});
    }
    const auto jobs = l.getJobs();
    if (jobs.size() > WorkerLoad::kMaxJobs)
      return Status::InvalidArgument("Heartbeat: more than " + std::to_string(WorkerLoad::kMaxJobs) + " jobs' times");
    for (auto j : jobs) {
      const auto name = j.getName();
      if (name.size() > 256) return Status::InvalidArgument("Heartbeat: a job name over 256 bytes");
      m.load.jobs.push_back({Str(name), j.getBusyNs()});
    }
    const auto have = r.getHaveJobs();
    if (have.size() > WorkerLoad::kMaxJobs)
      return Status::InvalidArgument("Heartbeat: more than " + std::to_string(WorkerLoad::kMaxJobs) + " jobs held");
    for (auto h : have) m.have_jobs[Str(h.getName())] = h.getDigest();
    return m;
  });
}

Result<HeartbeatOkMsg> DecodeHeartbeatOk(const InFrame& f) {
  return Decode<ctl::HeartbeatOk>(f, MessageType::kHeartbeatOk, [](ctl::HeartbeatOk::Reader r) -> Result<HeartbeatOkMsg> {
    HeartbeatOkMsg m;
    for (auto l : r.getLeases()) m.leases.push_back({Str(l.getJob()), l.getEpoch(), l.getSplit(), Str(l.getConsumer())});
    for (auto j : r.getJobs()) {
      FERRY_ASSIGN_OR_RETURN(NamedJob c, GetNamedJob(j));
      m.jobs.push_back(std::move(c));
    }
    m.known = r.getKnown();
    m.new_leases = r.getNewLeases();
    m.idle = r.getIdle();
    m.drain = r.getDrain();
    for (auto g : r.getGoneJobs()) m.gone_jobs.push_back(Str(g));
    for (auto g : r.getSameJobs()) m.same_jobs.push_back(Str(g));
    if (m.new_leases > m.leases.size()) return Status::InvalidArgument("HeartbeatOk: newLeases exceeds the leases");
    return m;
  });
}

Result<GetOrCreateJobMsg> DecodeGetOrCreateJob(const InFrame& f) {
  return Decode<ctl::GetOrCreateJob>(
      f, MessageType::kGetOrCreateJob, [](ctl::GetOrCreateJob::Reader r) -> Result<GetOrCreateJobMsg> {
        GetOrCreateJobMsg m;
        FERRY_ASSIGN_OR_RETURN(m.job, GetNamedJob(r.getJob()));
        m.consumer_id = Str(r.getConsumerId());
        m.fresh = r.getFresh();
        return m;
      });
}

Result<NamedJob> DecodeJobInfo(const InFrame& f) {
  return Decode<ctl::JobInfo>(f, MessageType::kJobInfo,
                              [](ctl::JobInfo::Reader r) -> Result<NamedJob> { return GetNamedJob(r.getJob()); });
}

Status DecodeGetWorkers(const InFrame& f) { return DecodeGetWorkersMsg(f).status(); }

Result<GetWorkersMsg> DecodeGetWorkersMsg(const InFrame& f) {
  return Decode<ctl::GetWorkers>(f, MessageType::kGetWorkers, [](ctl::GetWorkers::Reader r) -> Result<GetWorkersMsg> {
    return GetWorkersMsg{Str(r.getJob()), Str(r.getConsumerId())};
  });
}

Result<std::vector<std::string>> DecodeWorkerList(const InFrame& f) {
  return Decode<ctl::WorkerList>(f, MessageType::kWorkerList, [](ctl::WorkerList::Reader r) -> Result<std::vector<std::string>> {
    std::vector<std::string> out;
    for (auto a : r.getAddresses()) out.push_back(Str(a));
    return out;
  });
}

Result<AckSplitsMsg> DecodeAckSplits(const InFrame& f) {
  return Decode<ctl::AckSplits>(f, MessageType::kAckSplits, [](ctl::AckSplits::Reader r) -> Result<AckSplitsMsg> {
    AckSplitsMsg m;
    m.job = Str(r.getJob());
    m.consumer_id = Str(r.getConsumerId());
    for (auto s : r.getSplits()) m.splits.push_back({s.getEpoch(), s.getSplit()});
    m.load = GetLoad(r.getLoad());
    return m;
  });
}

OutFrame EncodeRestoreConsumer(const RestoreConsumerMsg& m) {
  return Build(MessageType::kRestoreConsumer, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<ctl::RestoreConsumer>();
    r.setJob(m.job);
    r.setConsumerId(m.consumer_id);
    r.setFirstOpen(m.first_open);
    // Packed per epoch where every epoch's splits pack; else the plain list.
    std::map<uint64_t, std::vector<int64_t>> by_epoch;
    for (const SplitId& s : m.done) by_epoch[s.epoch].push_back(s.split);
    std::vector<std::pair<uint64_t, std::string>> packed;
    bool packs = true;
    for (auto& [epoch, splits] : by_epoch) {
      std::optional<std::string> p = PackSplitSet(splits);
      if (!p) {
        packs = false;
        break;
      }
      packed.emplace_back(epoch, std::move(*p));
    }
    if (packs) {
      auto l = r.initDonePacked(unsigned(packed.size()));
      for (unsigned i = 0; i < packed.size(); ++i) {
        l[i].setEpoch(packed[i].first);
        l[i].setSplits(
            capnp::Data::Reader(reinterpret_cast<const kj::byte*>(packed[i].second.data()), packed[i].second.size()));
      }
      return;
    }
    auto done = r.initDone(unsigned(m.done.size()));
    for (unsigned i = 0; i < m.done.size(); ++i) {
      done[i].setEpoch(m.done[i].epoch);
      done[i].setSplit(m.done[i].split);
    }
  });
}

Result<RestoreConsumerMsg> DecodeRestoreConsumer(const InFrame& f) {
  return Decode<ctl::RestoreConsumer>(
      f, MessageType::kRestoreConsumer, [](ctl::RestoreConsumer::Reader r) -> Result<RestoreConsumerMsg> {
        RestoreConsumerMsg m;
        m.job = Str(r.getJob());
        m.consumer_id = Str(r.getConsumerId());
        m.first_open = r.getFirstOpen();
        for (auto s : r.getDone()) m.done.push_back({s.getEpoch(), s.getSplit()});
        for (auto e : r.getDonePacked()) {
          auto bytes = e.getSplits();
          // All epochs together are bounded like one reply's splits.
          const size_t room = kMaxPackedSplits - std::min(m.done.size(), kMaxPackedSplits);
          FERRY_ASSIGN_OR_RETURN(std::vector<int64_t> splits,
                                 UnpackSplitSet(bytes.begin(), bytes.size(), room, kMaxPackedSplit));
          for (int64_t s : splits) m.done.push_back({e.getEpoch(), s});
        }
        return m;
      });
}

OutFrame EncodeReportWorker(const std::string& address) {
  return Build(MessageType::kReportWorker,
               [&](capnp::MessageBuilder& b) { b.initRoot<ctl::ReportWorker>().setAddress(address); });
}

Result<std::string> DecodeReportWorker(const InFrame& f) {
  return Decode<ctl::ReportWorker>(f, MessageType::kReportWorker,
                                   [](ctl::ReportWorker::Reader r) -> Result<std::string> { return Str(r.getAddress()); });
}

OutFrame EncodeDrainWorker(const std::string& worker) {
  return Build(MessageType::kDrainWorker,
               [&](capnp::MessageBuilder& b) { b.initRoot<ctl::DrainWorker>().setWorker(worker); });
}

Result<std::string> DecodeDrainWorker(const InFrame& f) {
  return Decode<ctl::DrainWorker>(f, MessageType::kDrainWorker, [](ctl::DrainWorker::Reader r) -> Result<std::string> {
    std::string w = Str(r.getWorker());
    if (w.empty()) return Status::InvalidArgument("DrainWorker names no worker");
    return w;
  });
}

OutFrame EncodeGetClusterStatus() {
  return Build(MessageType::kGetClusterStatus, [&](capnp::MessageBuilder& b) { b.initRoot<ctl::GetClusterStatus>(); });
}

Status DecodeGetClusterStatus(const InFrame& f) {
  return Decode<ctl::GetClusterStatus>(f, MessageType::kGetClusterStatus,
                                       [](ctl::GetClusterStatus::Reader) -> Result<bool> { return true; })
      .status();
}

OutFrame EncodeClusterStatus(const ClusterStatusMsg& m) {
  return Build(MessageType::kClusterStatus, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<ctl::ClusterStatus>();
    r.setStateId(m.state_id);
    r.setJournalWritable(m.journal_writable);
    auto ws = r.initWorkers(unsigned(m.workers.size()));
    for (unsigned i = 0; i < m.workers.size(); ++i) {
      const WorkerStatusMsg& w = m.workers[i];
      ws[i].setId(w.id);
      ws[i].setAddress(w.address);
      ws[i].setDraining(w.draining);
      ws[i].setLeases(w.leases);
      ws[i].setSilentMs(w.silent_ms);
      ws[i].setServesJob(w.serves_job);
      ws[i].setServesConsumer(w.serves_consumer);
      ws[i].setSamplesPerSecond(w.samples_per_second);
      ws[i].setCapacity(w.capacity);
      auto u = ws[i].initUnfitJobs(unsigned(w.unfit_jobs.size()));
      unsigned k = 0;
      for (const auto& [name, reason] : w.unfit_jobs) {
        u[k].setName(name);
        u[k].setReason(reason);
        ++k;
      }
    }
    auto js = r.initJobs(unsigned(m.jobs.size()));
    for (unsigned i = 0; i < m.jobs.size(); ++i) {
      const JobSummaryMsg& j = m.jobs[i];
      js[i].setName(j.name);
      js[i].setDataset(j.dataset);
      js[i].setNumSamples(j.num_samples);
      auto c = js[i].initConsumers(unsigned(j.consumers.size()));
      for (unsigned k = 0; k < j.consumers.size(); ++k) c.set(k, j.consumers[k]);
      js[i].setFirstOpen(j.first_open);
      js[i].setEpochs(j.epochs);
      js[i].setSplitsPerEpoch(j.splits_per_epoch);
      js[i].setPending(j.pending);
      js[i].setLeased(j.leased);
      js[i].setDone(j.done);
      js[i].setFinished(j.finished);
      js[i].setRanks(j.ranks);
      js[i].setInputWait(j.input_wait);
      js[i].setDemand(j.demand);
      js[i].setRecommendedWorkers(j.recommended_workers);
      js[i].setLimitedBy(j.limited_by);
      js[i].setThreadShare(j.thread_share);
      js[i].setWeight(j.weight);
      js[i].setPriority(j.priority);
    }
  });
}

Result<ClusterStatusMsg> DecodeClusterStatus(const InFrame& f) {
  return Decode<ctl::ClusterStatus>(f, MessageType::kClusterStatus,
                                    [](ctl::ClusterStatus::Reader r) -> Result<ClusterStatusMsg> {
    ClusterStatusMsg m;
    m.state_id = Str(r.getStateId());
    m.journal_writable = r.getJournalWritable();
    for (auto w : r.getWorkers()) {
      WorkerStatusMsg x;
      x.id = Str(w.getId());
      x.address = Str(w.getAddress());
      x.draining = w.getDraining();
      x.leases = w.getLeases();
      x.silent_ms = w.getSilentMs();
      x.serves_job = Str(w.getServesJob());
      x.serves_consumer = Str(w.getServesConsumer());
      for (auto u : w.getUnfitJobs()) x.unfit_jobs[Str(u.getName())] = Str(u.getReason());
      x.samples_per_second = w.getSamplesPerSecond();
      x.capacity = w.getCapacity();
      m.workers.push_back(std::move(x));
    }
    for (auto j : r.getJobs()) {
      JobSummaryMsg x;
      x.name = Str(j.getName());
      x.dataset = Str(j.getDataset());
      x.num_samples = j.getNumSamples();
      for (auto c : j.getConsumers()) x.consumers.push_back(Str(c));
      x.first_open = j.getFirstOpen();
      x.epochs = j.getEpochs();
      x.splits_per_epoch = j.getSplitsPerEpoch();
      x.pending = j.getPending();
      x.leased = j.getLeased();
      x.done = j.getDone();
      x.finished = j.getFinished();
      x.ranks = j.getRanks();
      x.input_wait = j.getInputWait();
      x.demand = j.getDemand();
      x.recommended_workers = j.getRecommendedWorkers();
      x.limited_by = Str(j.getLimitedBy());
      x.thread_share = j.getThreadShare();
      x.weight = j.getWeight();
      x.priority = j.getPriority();
      m.jobs.push_back(std::move(x));
    }
    return m;
  });
}

Result<GetJobStatusMsg> DecodeGetJobStatus(const InFrame& f) {
  return Decode<ctl::GetJobStatus>(f, MessageType::kGetJobStatus, [](ctl::GetJobStatus::Reader r) -> Result<GetJobStatusMsg> {
    return GetJobStatusMsg{Str(r.getJob()), Str(r.getConsumerId()), r.getEpoch(), GetLoad(r.getLoad())};
  });
}

Result<JobStatusMsg> DecodeJobStatus(const InFrame& f) {
  return Decode<ctl::JobStatus>(f, MessageType::kJobStatus, [](ctl::JobStatus::Reader r) -> Result<JobStatusMsg> {
    JobStatusMsg m;
    m.first_open = r.getFirstOpen();
    m.finished = r.getFinished();
    for (int64_t s : r.getMySplits()) m.my_splits.push_back(s);
    if (r.hasMySplitsPacked()) {
      if (!m.my_splits.empty()) return Status::InvalidArgument("JobStatus: splits both listed and packed");
      auto packed = r.getMySplitsPacked();
      FERRY_ASSIGN_OR_RETURN(m.my_splits, UnpackSplitSet(packed.begin(), packed.size(), kMaxPackedSplits, kMaxPackedSplit));
    }
    m.epoch_fully_assigned = r.getEpochFullyAssigned();
    return m;
  });
}

}  // namespace ferry::wire
