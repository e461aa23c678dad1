// The journal's records, format 2: each Update is one Cap'n Proto message
// (schemas/journal.capnp), in place of format 1's hand-kept tags and varints. Format
// 1 is still read (DecodeUpdateV1), so that a dispatcher upgraded in place replays its
// old journal, then compacts it into format 2 at once.
#include "dispatch/journal_codec.h"

#include <array>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>
#include <type_traits>

#include "journal.capnp.h"
#include "wire/codec.h"

namespace ferry::dispatch {

namespace {

namespace j = schema::journal;

std::string Str(capnp::Text::Reader t) { return std::string(t.cStr(), t.size()); }

template <typename List>
void FillRefs(List list, const std::vector<SplitId>& refs) {
  for (unsigned i = 0; i < refs.size(); ++i) {
    list[i].setEpoch(refs[i].epoch);
    list[i].setSplit(refs[i].split);
  }
}

std::vector<SplitId> ReadRefs(capnp::List<j::SplitRef>::Reader list) {
  std::vector<SplitId> out;
  out.reserve(list.size());
  for (auto r : list) out.push_back({r.getEpoch(), r.getSplit()});
  return out;
}

// --- Format 1: a small bounds-checked binary encoding (read only) ---------------

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  // A varint of at most 64 bits: a tenth byte with more than its lowest bit, or an
  // eleventh, is malformed (format 1's writer never made one).
  bool U64(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= s_.size()) return false;
      const uint8_t b = uint8_t(s_[pos_++]);
      if (shift == 63 && (b & 0x7e) != 0) return false;
      *v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  bool I64(int64_t* v) {
    uint64_t u;
    if (!U64(&u)) return false;
    *v = int64_t(u >> 1) ^ -int64_t(u & 1);
    return true;
  }
  bool Str(std::string* v) {
    uint64_t n;
    if (!U64(&n) || n > s_.size() - pos_) return false;
    v->assign(s_, pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == s_.size(); }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

// Format 1's tags. Tag 1 was CreateJob with a job encoding of its own (before one
// JobSpec travelled everywhere): such a journal is refused with a clear error.
enum Tag : uint64_t {
  kCreateJobV1 = 1, kAddConsumer, kRegisterWorker, kRemoveWorker, kDrainWorker, kLeaseSplits, kAckSplits, kRemoveJob,
  kJobProgress, kRestoreConsumer, kCreateJob, kRegisterServingWorker, kRemoveConsumer, kAssignSplits, kReturnSplits,
};

constexpr uint64_t kMaxListedV1 = 1 << 24;

}  // namespace

std::string EncodeUpdate(const Update& u) {
  // The first segment is this thread's, reused: a busy dispatcher encodes one record per
  // lease and acknowledgement, and a fresh builder's zeroed allocation was a twelfth of
  // its deciding thread. (The builder zeroes what it used when it goes.)
  thread_local std::array<capnp::word, 256> scratch{};
  capnp::MallocMessageBuilder mb(kj::arrayPtr(scratch.data(), scratch.size()));
  auto b = mb.initRoot<j::Update>();
  std::visit(
      [&b](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, CreateJob>) {
          auto g = b.initCreateJob();
          g.setName(x.name);
          const std::string job = wire::EncodeJobBytes(x.spec);  // the wire's Job: one encoding of a job
          g.setJob(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(job.data()), job.size()));
        } else if constexpr (std::is_same_v<T, AddConsumer>) {
          auto g = b.initAddConsumer();
          g.setJob(x.job);
          g.setConsumer(x.consumer);
        } else if constexpr (std::is_same_v<T, RegisterWorker>) {
          auto g = b.initRegisterWorker();
          g.setWorker(x.worker);
          g.setAddress(x.address);
          g.setServesJob(x.serves_job);
          g.setServesConsumer(x.serves_consumer);
        } else if constexpr (std::is_same_v<T, RemoveWorker>) {
          b.setRemoveWorker(x.worker);
        } else if constexpr (std::is_same_v<T, DrainWorker>) {
          b.setDrainWorker(x.worker);
        } else if constexpr (std::is_same_v<T, ReturnSplits>) {
          auto g = b.initReturnSplits();
          g.setJob(x.job);
          g.setWorker(x.worker);
        } else if constexpr (std::is_same_v<T, LeaseSplits>) {
          auto g = b.initLeaseSplits();
          g.setJob(x.job);
          g.setWorker(x.worker);
          auto list = g.initSplits(unsigned(x.splits.size()));
          for (unsigned i = 0; i < x.splits.size(); ++i) {
            list[i].setEpoch(x.splits[i].ref.epoch);
            list[i].setSplit(x.splits[i].ref.split);
            list[i].setConsumer(x.splits[i].consumer);
          }
        } else if constexpr (std::is_same_v<T, AckSplits>) {
          auto g = b.initAckSplits();
          g.setJob(x.job);
          g.setConsumer(x.consumer);
          FillRefs(g.initSplits(unsigned(x.splits.size())), x.splits);
        } else if constexpr (std::is_same_v<T, RemoveJob>) {
          b.setRemoveJob(x.job);
        } else if constexpr (std::is_same_v<T, JobProgress>) {
          auto g = b.initJobProgress();
          g.setJob(x.job);
          g.setFirstOpen(x.first_open);
        } else if constexpr (std::is_same_v<T, RestoreConsumer>) {
          auto g = b.initRestoreConsumer();
          g.setJob(x.job);
          g.setConsumer(x.consumer);
          g.setFirstOpen(x.first_open);
          FillRefs(g.initDone(unsigned(x.done.size())), x.done);
        } else if constexpr (std::is_same_v<T, RemoveConsumer>) {
          auto g = b.initRemoveConsumer();
          g.setJob(x.job);
          g.setConsumer(x.consumer);
        } else if constexpr (std::is_same_v<T, AssignSplits>) {
          auto g = b.initAssignSplits();
          g.setJob(x.job);
          g.setConsumer(x.consumer);
          FillRefs(g.initSplits(unsigned(x.splits.size())), x.splits);
        }
      },
      u);
  // Straight into the string (no flat copy first).
  std::string out(capnp::computeSerializedSizeInWords(mb) * sizeof(capnp::word), '\0');
  kj::ArrayOutputStream stream(kj::arrayPtr(reinterpret_cast<kj::byte*>(out.data()), out.size()));
  capnp::writeMessage(stream, mb);
  return out;
}

Result<Update> DecodeUpdate(const std::string& bytes) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0)
    return Status::DataLoss("malformed update: " + std::to_string(bytes.size()) + " bytes, not whole words");
  // The file's bytes may sit anywhere in memory: Cap'n Proto reads aligned words.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  capnp::ReaderOptions limits;
  // The journal is the dispatcher's own file, read whole: any size it wrote reads back
  // (a snapshot record may list millions of splits), and no subtree is shared.
  limits.traversalLimitInWords = words.size() + 64;
  limits.nestingLimit = 16;
  try {
    capnp::FlatArrayMessageReader reader(words.asPtr(), limits);
    auto r = reader.getRoot<j::Update>();
    switch (r.which()) {
      case j::Update::CREATE_JOB: {
        auto g = r.getCreateJob();
        auto data = g.getJob();
        auto spec = wire::DecodeJobBytes(std::string(reinterpret_cast<const char*>(data.begin()), data.size()));
        if (!spec.ok()) return Status::DataLoss("malformed job in the journal: " + spec.status().message());
        return Update(CreateJob{Str(g.getName()), std::move(*spec)});
      }
      case j::Update::ADD_CONSUMER: {
        auto g = r.getAddConsumer();
        return Update(AddConsumer{Str(g.getJob()), Str(g.getConsumer())});
      }
      case j::Update::REGISTER_WORKER: {
        auto g = r.getRegisterWorker();
        return Update(RegisterWorker{Str(g.getWorker()), Str(g.getAddress()), Str(g.getServesJob()),
                                     Str(g.getServesConsumer())});
      }
      case j::Update::REMOVE_WORKER:
        return Update(RemoveWorker{Str(r.getRemoveWorker())});
      case j::Update::DRAIN_WORKER:
        return Update(DrainWorker{Str(r.getDrainWorker())});
      case j::Update::RETURN_SPLITS: {
        auto g = r.getReturnSplits();
        return Update(ReturnSplits{Str(g.getJob()), Str(g.getWorker())});
      }
      case j::Update::LEASE_SPLITS: {
        auto g = r.getLeaseSplits();
        LeaseSplits x{Str(g.getJob()), Str(g.getWorker()), {}};
        x.splits.reserve(g.getSplits().size());
        for (auto s : g.getSplits()) x.splits.push_back({{s.getEpoch(), s.getSplit()}, Str(s.getConsumer())});
        return Update(std::move(x));
      }
      case j::Update::ACK_SPLITS: {
        auto g = r.getAckSplits();
        return Update(AckSplits{Str(g.getJob()), Str(g.getConsumer()), ReadRefs(g.getSplits())});
      }
      case j::Update::REMOVE_JOB:
        return Update(RemoveJob{Str(r.getRemoveJob())});
      case j::Update::JOB_PROGRESS: {
        auto g = r.getJobProgress();
        return Update(JobProgress{Str(g.getJob()), g.getFirstOpen()});
      }
      case j::Update::RESTORE_CONSUMER: {
        auto g = r.getRestoreConsumer();
        return Update(RestoreConsumer{Str(g.getJob()), Str(g.getConsumer()), g.getFirstOpen(), ReadRefs(g.getDone())});
      }
      case j::Update::REMOVE_CONSUMER: {
        auto g = r.getRemoveConsumer();
        return Update(RemoveConsumer{Str(g.getJob()), Str(g.getConsumer())});
      }
      case j::Update::ASSIGN_SPLITS: {
        auto g = r.getAssignSplits();
        return Update(AssignSplits{Str(g.getJob()), Str(g.getConsumer()), ReadRefs(g.getSplits())});
      }
    }
    return Status::DataLoss("an update of a kind this dispatcher does not know (" + std::to_string(unsigned(r.which())) +
                            "): the journal was written by a newer Ferry");
  } catch (const kj::Exception& e) {
    return Status::DataLoss(std::string("malformed update: ") + e.getDescription().cStr());
  }
}

Result<Update> DecodeUpdateV1(const std::string& bytes) {
  Reader r(bytes);
  uint64_t tag;
  if (!r.U64(&tag)) return Status::DataLoss("empty update");
  auto bad = [] { return Status::DataLoss("malformed update"); };
  auto refs = [&r](std::vector<SplitId>* out) {
    uint64_t n;
    if (!r.U64(&n) || n > kMaxListedV1) return false;
    out->resize(size_t(n));
    for (auto& s : *out) {
      if (!r.U64(&s.epoch) || !r.I64(&s.split)) return false;
    }
    return true;
  };
  Update u;
  switch (tag) {
    case kCreateJob: {
      CreateJob x;
      std::string job;
      if (!r.Str(&x.name) || !r.Str(&job)) return bad();
      auto spec = wire::DecodeJobBytes(job);
      if (!spec.ok()) return Status::DataLoss("malformed job in the journal: " + spec.status().message());
      x.spec = std::move(*spec);
      u = std::move(x);
      break;
    }
    case kCreateJobV1:
      return Status::DataLoss(
          "the journal was written by an older Ferry (job format 1); start the dispatcher with an empty --work-dir");
    case kAddConsumer: {
      AddConsumer x;
      if (!r.Str(&x.job) || !r.Str(&x.consumer)) return bad();
      u = std::move(x);
      break;
    }
    case kRegisterWorker:
    case kRegisterServingWorker: {
      RegisterWorker x;
      if (!r.Str(&x.worker) || !r.Str(&x.address)) return bad();
      if (tag == kRegisterServingWorker && (!r.Str(&x.serves_job) || !r.Str(&x.serves_consumer))) return bad();
      u = std::move(x);
      break;
    }
    case kRemoveWorker: {
      RemoveWorker x;
      if (!r.Str(&x.worker)) return bad();
      u = std::move(x);
      break;
    }
    case kDrainWorker: {
      DrainWorker x;
      if (!r.Str(&x.worker)) return bad();
      u = std::move(x);
      break;
    }
    case kReturnSplits: {
      ReturnSplits x;
      if (!r.Str(&x.job) || !r.Str(&x.worker)) return bad();
      u = std::move(x);
      break;
    }
    case kLeaseSplits: {
      LeaseSplits x;
      uint64_t n;
      if (!r.Str(&x.job) || !r.Str(&x.worker) || !r.U64(&n) || n > kMaxListedV1) return bad();
      x.splits.resize(size_t(n));
      for (auto& l : x.splits) {
        if (!r.U64(&l.ref.epoch) || !r.I64(&l.ref.split) || !r.Str(&l.consumer)) return bad();
      }
      u = std::move(x);
      break;
    }
    case kAckSplits: {
      AckSplits x;
      if (!r.Str(&x.job) || !r.Str(&x.consumer) || !refs(&x.splits)) return bad();
      u = std::move(x);
      break;
    }
    case kRemoveJob: {
      RemoveJob x;
      if (!r.Str(&x.job)) return bad();
      u = std::move(x);
      break;
    }
    case kJobProgress: {
      JobProgress x;
      if (!r.Str(&x.job) || !r.U64(&x.first_open)) return bad();
      u = std::move(x);
      break;
    }
    case kRestoreConsumer: {
      RestoreConsumer x;
      if (!r.Str(&x.job) || !r.Str(&x.consumer) || !r.U64(&x.first_open) || !refs(&x.done)) return bad();
      u = std::move(x);
      break;
    }
    case kRemoveConsumer: {
      RemoveConsumer x;
      if (!r.Str(&x.job) || !r.Str(&x.consumer)) return bad();
      u = std::move(x);
      break;
    }
    case kAssignSplits: {
      AssignSplits x;
      if (!r.Str(&x.job) || !r.Str(&x.consumer) || !refs(&x.splits)) return bad();
      u = std::move(x);
      break;
    }
    default:
      return Status::DataLoss("unknown update tag " + std::to_string(tag));
  }
  if (!r.done()) return bad();
  return u;
}

}  // namespace ferry::dispatch
