// The data plane's codec: plain structs <-> Cap'n Proto messages <-> frames.
#include "wire/codec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>

#include "ferry.capnp.h"
#include "wire/decode.h"
#include "wire/job_codec.h"
#include "wire/out_frame.h"

namespace ferry::wire {

using codec::Build;
using codec::Decode;
using codec::Str;

static_assert(uint16_t(MessageType::kBatch) == uint16_t(schema::MessageType::BATCH));
static_assert(uint16_t(MessageType::kError) == uint16_t(schema::MessageType::ERROR));
static_assert(uint16_t(MessageType::kChallenge) == uint16_t(schema::MessageType::CHALLENGE));
static_assert(kProtocolVersion == schema::PROTOCOL_VERSION);

// ---------------------------------------------------------------------------------
// Encoding

namespace {

kj::ArrayPtr<const kj::byte> Bytes(const std::string& s) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

}  // namespace

OutFrame EncodeChallenge(const ChallengeMsg& m) {
  return Build(MessageType::kChallenge, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<schema::Challenge>();
    r.setVersion(kProtocolVersion);
    r.setNonce(Bytes(m.nonce));
    r.setAuthRequired(m.auth_required);
    r.setServerId(m.server_id);
  });
}

OutFrame EncodeHello(const HelloMsg& m) {
  return Build(MessageType::kHello, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<schema::Hello>();
    r.setVersion(kProtocolVersion);
    r.setRole(schema::Role(uint16_t(m.role)));
    r.setMac(Bytes(m.mac));
    r.setPeerId(m.peer_id);
    if (!m.nonce.empty()) r.setNonce(Bytes(m.nonce));
  });
}

OutFrame EncodeHelloOk(const std::string& server_id, const std::string& state_id, const std::string& mac) {
  return Build(MessageType::kHelloOk, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<schema::HelloOk>();
    r.setServerId(server_id);
    if (!state_id.empty()) r.setStateId(state_id);
    if (!mac.empty()) r.setMac(Bytes(mac));
  });
}

OutFrame EncodeOpenStream(const OpenStreamMsg& m) {
  return Build(MessageType::kOpenStream, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<schema::OpenStream>();
    if (m.by_name) {
      r.getJob().setName(m.job_name);
    } else {
      codec::PutJob(r.getJob().initInline(), m.job);
    }
    r.setConsumerId(m.consumer_id);
    r.setCredits(m.credits);
    r.setShardIndex(m.shard_index);
    r.setNumShards(m.num_shards);
    r.setFirstEpoch(m.first_epoch);
    r.setRank(m.rank);
    r.setJobConfig(m.job_config);
    auto resume = r.initResume();
    resume.setEpoch(m.resume_epoch);
    resume.setBatchesDone(m.resume_batches_done);
  });
}

OutFrame EncodeCredit(uint32_t n) {
  return Build(MessageType::kCredit, [&](capnp::MessageBuilder& b) { b.initRoot<schema::Credit>().setN(n); });
}

OutFrame EncodeEndOfEpoch(const EndOfEpochMsg& m) {
  return Build(MessageType::kEndOfEpoch, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<schema::EndOfEpoch>();
    r.setEpoch(m.epoch);
    r.setBatches(m.batches);
    r.setSamples(m.samples);
    r.setLast(m.last);
  });
}

OutFrame EncodeError(const Status& s) {
  return Build(MessageType::kError, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<schema::Error>();
    r.setCode(uint8_t(s.code()));
    r.setMessage(s.message());
  });
}

// ---------------------------------------------------------------------------------
// Decoding


Result<ChallengeMsg> DecodeChallenge(const InFrame& f) {
  return Decode<schema::Challenge>(f, MessageType::kChallenge, [](schema::Challenge::Reader r) -> Result<ChallengeMsg> {
    if (r.getVersion() != kProtocolVersion) return Status::FailedPrecondition("protocol version mismatch");
    ChallengeMsg m;
    m.nonce = Str(r.getNonce());
    m.auth_required = r.getAuthRequired();
    m.server_id = Str(r.getServerId());
    return m;
  });
}

Result<HelloMsg> DecodeHello(const InFrame& f) {
  return Decode<schema::Hello>(f, MessageType::kHello, [](schema::Hello::Reader r) -> Result<HelloMsg> {
    if (r.getVersion() != kProtocolVersion) return Status::FailedPrecondition("protocol version mismatch");
    HelloMsg m;
    const uint16_t role = uint16_t(r.getRole());
    if (role > uint16_t(Role::kTool)) return Status::InvalidArgument("Hello: unknown role");
    m.role = Role(role);
    m.mac = Str(r.getMac());
    m.peer_id = Str(r.getPeerId());
    m.nonce = Str(r.getNonce());
    return m;
  });
}

Result<HelloOkMsg> DecodeHelloOk(const InFrame& f) {
  return Decode<schema::HelloOk>(f, MessageType::kHelloOk, [](schema::HelloOk::Reader r) -> Result<HelloOkMsg> {
    return HelloOkMsg{Str(r.getServerId()), Str(r.getStateId()), Str(r.getMac())};
  });
}

Result<OpenStreamMsg> DecodeOpenStream(const InFrame& f) {
  return Decode<schema::OpenStream>(f, MessageType::kOpenStream, [](schema::OpenStream::Reader r) -> Result<OpenStreamMsg> {
    OpenStreamMsg m;
    auto job = r.getJob();
    if (job.isName()) {
      m.by_name = true;
      m.job_name = Str(job.getName());
    } else {
      FERRY_ASSIGN_OR_RETURN(m.job, codec::GetJob(job.getInline()));
    }
    m.consumer_id = Str(r.getConsumerId());
    m.credits = r.getCredits();
    m.shard_index = r.getShardIndex();
    m.num_shards = r.getNumShards();
    m.first_epoch = r.getFirstEpoch();
    m.rank = r.getRank();
    m.job_config = r.getJobConfig();
    m.resume_epoch = r.getResume().getEpoch();
    m.resume_batches_done = r.getResume().getBatchesDone();
    return m;
  });
}

Result<uint32_t> DecodeCredit(const InFrame& f) {
  return Decode<schema::Credit>(f, MessageType::kCredit, [](schema::Credit::Reader r) -> Result<uint32_t> { return r.getN(); });
}

Result<EndOfEpochMsg> DecodeEndOfEpoch(const InFrame& f) {
  return Decode<schema::EndOfEpoch>(f, MessageType::kEndOfEpoch, [](schema::EndOfEpoch::Reader r) -> Result<EndOfEpochMsg> {
    EndOfEpochMsg m;
    m.epoch = r.getEpoch();
    m.batches = r.getBatches();
    m.samples = r.getSamples();
    m.last = r.getLast();
    return m;
  });
}

Result<ErrorMsg> DecodeError(const InFrame& f) {
  return Decode<schema::Error>(f, MessageType::kError, [](schema::Error::Reader r) -> Result<ErrorMsg> {
    uint8_t code = r.getCode();
    if (code == 0 || code > uint8_t(StatusCode::kCancelled)) code = uint8_t(StatusCode::kInternal);
    return ErrorMsg{Status(StatusCode(code), Str(r.getMessage()))};
  });
}

namespace {

// rank < 0: any rank from 1 to 4.
Result<TensorView> ReadTensor(schema::Tensor::Reader t, const char* name, int rank) {
  TensorView v;
  const uint16_t dt = uint16_t(t.getDtype());
  if (dt > uint16_t(DType::kInt32)) return Status::InvalidArgument(std::string("Batch: ") + name + ": unknown dtype");
  v.dtype = DType(dt);
  auto shape = t.getShape();
  if (rank < 0 && shape.size() >= 1 && shape.size() <= 4) rank = int(shape.size());
  if (int(shape.size()) != rank)
    return Status::InvalidArgument(std::string("Batch: ") + name + ": expected rank " +
                                   (rank < 0 ? std::string("1 to 4") : std::to_string(rank)));
  v.rank = rank;
  __int128 elements = 1;
  for (int i = 0; i < rank; ++i) {
    const int64_t d = shape[unsigned(i)];
    if (d < 0 || d > (int64_t{1} << 40)) return Status::InvalidArgument(std::string("Batch: ") + name + ": bad shape");
    v.shape[size_t(i)] = d;
    elements *= d;
    // Four factors of up to 2^40 would overflow even 128 bits (and could wrap around
    // to match the data size); no real tensor has 2^48 elements.
    if (elements > (__int128(1) << 48))
      return Status::InvalidArgument(std::string("Batch: ") + name + ": bad shape (too many elements)");
  }
  auto data = t.getData();
  if (elements * __int128(DTypeSize(v.dtype)) != __int128(data.size()))
    return Status::InvalidArgument(std::string("Batch: ") + name + ": data size does not match shape");
  v.data = const_cast<kj::byte*>(data.begin());
  if (v.dtype != DType::kUint8 && (reinterpret_cast<uintptr_t>(v.data) % DTypeSize(v.dtype)) != 0)
    return Status::InvalidArgument(std::string("Batch: ") + name + ": misaligned data");
  return v;
}

}  // namespace

OutFrame EncodeBatch(const BatchFrameInput& in) {
  auto builder = std::make_unique<capnp::MallocMessageBuilder>(128 + 16 * unsigned(in.skipped.size()));
  auto r = builder->initRoot<schema::Batch>();
  r.setJob(in.job);
  r.setEpoch(in.provenance.epoch);
  r.setSplit(in.provenance.split);
  r.setBatchInSplit(in.provenance.batch_in_split);
  r.setBatchesInSplit(in.provenance.batches_in_split);
  r.setBatchInEpoch(in.provenance.batch_in_epoch);
  r.setBatchesInEpoch(in.provenance.batches_in_epoch);
  r.setLastInEpoch(in.provenance.last_in_epoch);
  r.setValid(in.valid);
  r.setListing(in.listing);
  r.setListedSamples(in.listed_samples);
  capnp::Orphanage orphanage = builder->getOrphanage();
  // The tensors are not copied into the message: each becomes a segment of its own
  // that points at the batch memory the pipeline wrote (referenceExternalData), and
  // goes out in the scatter-gather write as it is.
  auto tensor = [&](schema::Tensor::Builder t, DType dtype, std::initializer_list<int64_t> shape, const void* data,
                    size_t bytes) {
    t.setDtype(schema::DType(uint16_t(dtype)));
    auto s = t.initShape(unsigned(shape.size()));
    unsigned i = 0;
    for (int64_t d : shape) s.set(i++, d);
    if (bytes > 0) {
      t.adoptData(orphanage.referenceExternalData(
          capnp::Data::Reader(static_cast<const kj::byte*>(data), bytes)));
    } else {
      t.initData(0);
    }
  };
  const auto& d = in.image_dims;
  tensor(r.initImages(), in.image_dtype, {in.rows, d[0], d[1], d[2]}, in.images,
         size_t(in.rows) * size_t(d[0] * d[1] * d[2]) * DTypeSize(in.image_dtype));
  tensor(r.initLabels(), DType::kInt64, {in.rows}, in.labels, size_t(in.rows) * sizeof(int64_t));
  tensor(r.initIndices(), DType::kInt64, {in.rows}, in.indices, size_t(in.rows) * sizeof(int64_t));
  if (in.num_classes > 0 && in.targets != nullptr)
    tensor(r.initTargets(), DType::kFloat32, {in.rows, in.num_classes}, in.targets,
           size_t(in.rows) * size_t(in.num_classes) * sizeof(float));
  if (!in.fields.empty()) {
    auto fields = r.initFields(unsigned(in.fields.size()));
    for (unsigned i = 0; i < in.fields.size(); ++i) {
      const BatchField& f = in.fields[i];
      fields[i].setName(f.name);
      const TensorView& v = f.values;
      auto t = fields[i].initValues();
      t.setDtype(schema::DType(uint16_t(v.dtype)));
      auto s = t.initShape(unsigned(v.rank));
      for (int k = 0; k < v.rank; ++k) s.set(unsigned(k), v.shape[size_t(k)]);
      if (v.num_bytes() > 0) {
        t.adoptData(orphanage.referenceExternalData(capnp::Data::Reader(static_cast<const kj::byte*>(v.data), v.num_bytes())));
      } else {
        t.initData(0);
      }
      if (f.ragged())
        tensor(fields[i].initOffsets(), DType::kInt64, {f.offsets.shape[0]}, f.offsets.data, f.offsets.num_bytes());
    }
  }
  if (!in.structure.empty()) {
    r.setStructure(in.structure);
    if (in.user_bytes > 0) {
      r.adoptUserData(orphanage.referenceExternalData(
          capnp::Data::Reader(static_cast<const kj::byte*>(in.user_data), in.user_bytes)));
    }
  }
  auto sk = r.initSkipped(unsigned(in.skipped.size()));
  for (unsigned i = 0; i < in.skipped.size(); ++i) {
    sk[i].setIndex(in.skipped[i].index);
    sk[i].setPath(in.skipped[i].path);
    sk[i].setReason(in.skipped[i].reason);
  }
  return OutFrame(std::make_unique<OutFrame::Impl>(MessageType::kBatch, std::move(builder), in.owner));
}

Result<Batch> DecodeBatch(const InFrame& f, std::vector<SkippedSample>* skipped, BatchListing* listing) {
  return Decode<schema::Batch>(f, MessageType::kBatch, [&](schema::Batch::Reader r) -> Result<Batch> {
    Batch b;
    FERRY_ASSIGN_OR_RETURN(b.images, ReadTensor(r.getImages(), "images", 4));
    FERRY_ASSIGN_OR_RETURN(b.labels, ReadTensor(r.getLabels(), "labels", 1));
    FERRY_ASSIGN_OR_RETURN(b.indices, ReadTensor(r.getIndices(), "indices", 1));
    if ((b.images.dtype != DType::kUint8 && b.images.dtype != DType::kFloat32) || b.labels.dtype != DType::kInt64 || b.indices.dtype != DType::kInt64)
      return Status::InvalidArgument("Batch: wrong tensor dtypes");
    const int64_t rows = b.labels.shape[0];
    if (b.images.shape[0] != rows || b.indices.shape[0] != rows)
      return Status::InvalidArgument("Batch: tensors disagree on the number of rows");
    if (r.hasTargets()) {
      FERRY_ASSIGN_OR_RETURN(b.targets, ReadTensor(r.getTargets(), "targets", 2));
      if (b.targets.dtype != DType::kFloat32 || b.targets.shape[0] != rows)
        return Status::InvalidArgument("Batch: targets must be float32 with one row per sample");
    }
    b.valid = r.getValid();
    if (b.valid < 0 || b.valid > rows) return Status::InvalidArgument("Batch: valid rows out of range");
    // Fields: names unique and short; dense ones a row each; ragged ones with offsets
    // [rows + 1] from 0, non-decreasing, ending at the values' first dimension.
    auto fields = r.getFields();
    if (fields.size() > JobSpec::kMaxBatchFields)
      return Status::InvalidArgument("Batch: more fields than a job can name");
    for (auto fr : fields) {
      BatchField f;
      f.name = Str(fr.getName());
      if (f.name.empty() || f.name.size() > 64) return Status::InvalidArgument("Batch: a field name is empty or long");
      if (b.field(f.name) != nullptr) return Status::InvalidArgument("Batch: field " + f.name + " twice");
      const std::string what = "field " + f.name;
      FERRY_ASSIGN_OR_RETURN(f.values, ReadTensor(fr.getValues(), what.c_str(), -1));
      if (fr.hasOffsets()) {
        FERRY_ASSIGN_OR_RETURN(f.offsets, ReadTensor(fr.getOffsets(), (what + " offsets").c_str(), 1));
        if (f.offsets.dtype != DType::kInt64 || f.offsets.shape[0] != rows + 1)
          return Status::InvalidArgument("Batch: " + what + ": offsets must be int64 [rows + 1]");
        const int64_t* o = f.offsets.as<int64_t>();
        if (o[0] != 0) return Status::InvalidArgument("Batch: " + what + ": offsets must start at 0");
        for (int64_t k = 0; k < rows; ++k)
          if (o[k + 1] < o[k]) return Status::InvalidArgument("Batch: " + what + ": offsets decrease");
        if (o[rows] != f.values.shape[0])
          return Status::InvalidArgument("Batch: " + what + ": offsets end at " + std::to_string(o[rows]) +
                                         ", not at the values' " + std::to_string(f.values.shape[0]));
      } else if (f.values.shape[0] != rows) {
        return Status::InvalidArgument("Batch: " + what + ": a dense field has one entry per row");
      }
      b.fields.push_back(std::move(f));
    }
    if (r.hasStructure()) {
      b.structure = Str(r.getStructure());
      auto u = r.getUserData();
      b.user_data.data = const_cast<kj::byte*>(u.begin());
      b.user_data.dtype = DType::kUint8;
      b.user_data.rank = 1;
      b.user_data.shape[0] = int64_t(u.size());
    }
    b.provenance.epoch = r.getEpoch();
    b.provenance.split = r.getSplit();
    b.provenance.batch_in_split = r.getBatchInSplit();
    b.provenance.batches_in_split = r.getBatchesInSplit();
    b.provenance.batch_in_epoch = r.getBatchInEpoch();
    b.provenance.batches_in_epoch = r.getBatchesInEpoch();
    b.provenance.last_in_epoch = r.getLastInEpoch();
    if (listing) *listing = {r.getListing(), r.getListedSamples()};
    auto sk = r.getSkipped();
    b.skipped = int64_t(sk.size());
    if (skipped) {
      for (auto s : sk) skipped->push_back({s.getIndex(), Str(s.getPath()), Str(s.getReason())});
    }
    b.keepalive = f.body;
    b.buffer = f.body->data();
    b.buffer_size = f.body->size();
    return b;
  });
}

// ---------------------------------------------------------------------------------
// Jobs

const char* RoleName(Role r) {
  switch (r) {
    case Role::kClient: return "client";
    case Role::kWorker: return "worker";
    case Role::kDispatcher: return "dispatcher";
    case Role::kTool: return "tool";
  }
  return "?";
}

namespace codec {

static_assert(uint16_t(schema::LastBatch::DROP) == uint16_t(LastBatch::kDrop));
static_assert(uint16_t(schema::LastBatch::PAD) == uint16_t(LastBatch::kPad));
static_assert(uint16_t(schema::LastBatch::KEEP) == uint16_t(LastBatch::kKeep));
static_assert(uint16_t(schema::BadSamples::REFILL) == uint16_t(BadSamples::kRefill));
static_assert(uint16_t(schema::ProcessingMode::PARALLEL_EPOCHS) == uint16_t(ProcessingMode::kParallelEpochs));
static_assert(uint16_t(schema::Ordering::DETERMINISTIC) == uint16_t(Ordering::kDeterministic));
static_assert(uint16_t(schema::Sharing::EVERY) == uint16_t(Sharing::kEvery));

void PutJob(schema::Job::Builder b, const JobSpec& job, const std::string* pipeline_json) {
  b.setDataset(job.dataset);
  if (pipeline_json != nullptr) b.setPipelineJson(*pipeline_json);
  else b.setPipelineJson(job.pipeline.ToJson());
  b.setSeed(job.seed);
  b.setShuffle(job.shuffle);
  b.setEpochs(job.epochs);
  b.setBatchSize(job.batch_size);
  b.setLastBatch(schema::LastBatch(uint16_t(job.last_batch)));
  b.setBadSamples(schema::BadSamples(uint16_t(job.bad_samples)));
  b.setMode(schema::ProcessingMode(uint16_t(job.mode)));
  b.setOrdering(schema::Ordering(uint16_t(job.ordering)));
  b.setSharing(schema::Sharing(uint16_t(job.sharing)));
  b.setWeight(job.weight);
  b.setPriority(job.priority);
  b.setBatchesPerSplit(job.batches_per_split);
  b.setNumSamples(job.num_samples);
  b.setFingerprint(job.fingerprint);
  b.setNumConsumers(job.num_consumers);
  b.setFirstEpoch(job.first_epoch);
  if (!job.targets.empty()) {
    auto t = b.initTargets(unsigned(job.targets.size()));
    for (size_t i = 0; i < job.targets.size(); ++i) t.set(unsigned(i), job.targets[i]);
  }
  if (!job.tokenizer.model.empty()) {
    auto t = b.initTokenizer();
    t.setModel(job.tokenizer.model);
    t.setLength(job.tokenizer.length);
    t.setAddBos(job.tokenizer.add_bos);
    t.setAddEos(job.tokenizer.add_eos);
    t.setPadId(job.tokenizer.pad_id);
  }
  if (!job.user_code.payload.empty()) {
    auto u = b.initUserCode();
    u.setPayload(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(job.user_code.payload.data()),
                                     job.user_code.payload.size()));
    u.setVersions(job.user_code.versions);
    u.setInput(job.user_code.input);
  }
  if (job.mixed()) {
    auto m = b.initMixture(unsigned(job.mixture.size()));
    for (size_t i = 0; i < job.mixture.size(); ++i) {
      m[unsigned(i)].setDataset(job.mixture[i].dataset);
      m[unsigned(i)].setWeight(job.mixture[i].weight);
      m[unsigned(i)].setPipeline(job.mixture[i].pipeline);
      m[unsigned(i)].setNumSamples(job.mixture[i].num_samples);
    }
    b.setMixtureEpoch(job.mixture_epoch);
  }
  if (!job.taken.empty()) {
    auto begin = b.initTakenBegin(unsigned(job.taken.size()));
    auto end = b.initTakenEnd(unsigned(job.taken.size()));
    for (size_t i = 0; i < job.taken.size(); ++i) {
      begin.set(unsigned(i), job.taken[i].first);
      end.set(unsigned(i), job.taken[i].second);
    }
  }
}

Result<JobSpec> GetJob(schema::Job::Reader r) {
  JobSpec job;
  job.dataset = Str(r.getDataset());
  auto pipeline = PipelineSpec::FromJson(Str(r.getPipelineJson()));
  if (!pipeline.ok()) return pipeline.status().WithContext("job");
  job.pipeline = *pipeline;
  job.seed = r.getSeed();
  job.shuffle = r.getShuffle();
  job.epochs = r.getEpochs();
  job.batch_size = r.getBatchSize();
  const uint16_t lb = uint16_t(r.getLastBatch()), mode = uint16_t(r.getMode()), ord = uint16_t(r.getOrdering());
  if (lb > uint16_t(LastBatch::kKeep) || mode > uint16_t(ProcessingMode::kParallelEpochs) ||
      ord > uint16_t(Ordering::kDeterministic))
    return Status::InvalidArgument("job: unknown last-batch policy, mode or ordering");
  job.last_batch = LastBatch(lb);
  if (uint16_t(r.getBadSamples()) > uint16_t(BadSamples::kRefill))
    return Status::InvalidArgument("job: unknown bad-sample policy");
  job.bad_samples = BadSamples(uint16_t(r.getBadSamples()));
  job.mode = ProcessingMode(mode);
  job.ordering = Ordering(ord);
  if (uint16_t(r.getSharing()) > uint16_t(Sharing::kEvery)) return Status::InvalidArgument("job: unknown sharing");
  job.sharing = Sharing(uint16_t(r.getSharing()));
  job.weight = r.getWeight();
  job.priority = r.getPriority();
  job.batches_per_split = r.getBatchesPerSplit();
  job.num_samples = r.getNumSamples();
  job.fingerprint = r.getFingerprint();
  job.num_consumers = r.getNumConsumers();
  job.first_epoch = r.getFirstEpoch();
  const auto begin = r.getTakenBegin();
  const auto end = r.getTakenEnd();
  if (begin.size() != end.size()) return Status::InvalidArgument("job: taken ranges malformed");
  for (unsigned i = 0; i < begin.size(); ++i) job.taken.emplace_back(begin[i], end[i]);
  const auto mixture = r.getMixture();
  if (mixture.size() > JobSpec::kMaxMixtureSources) return Status::InvalidArgument("job: too many mixture sources");
  for (auto m : mixture)
    job.mixture.push_back({Str(m.getDataset()), m.getWeight(), Str(m.getPipeline()), m.getNumSamples()});
  job.mixture_epoch = r.getMixtureEpoch();
  const auto targets = r.getTargets();
  if (targets.size() > std::size(JobSpec::kTargetNames)) return Status::InvalidArgument("job: too many targets");
  for (auto t : targets) job.targets.push_back(Str(t));
  if (r.hasTokenizer()) {
    const auto t = r.getTokenizer();
    job.tokenizer.model = Str(t.getModel());
    job.tokenizer.length = t.getLength();
    job.tokenizer.add_bos = t.getAddBos();
    job.tokenizer.add_eos = t.getAddEos();
    job.tokenizer.pad_id = t.getPadId();
  }
  if (r.hasUserCode()) {
    const auto u = r.getUserCode();
    const auto payload = u.getPayload();
    if (payload.size() > UserCodeSpec::kMaxPayloadBytes) return Status::InvalidArgument("job: user code too large");
    job.user_code.payload.assign(reinterpret_cast<const char*>(payload.begin()), payload.size());
    job.user_code.versions = Str(u.getVersions());
    job.user_code.input = Str(u.getInput());
  }
  return job;
}

}  // namespace codec

std::string EncodeJobBytes(const JobSpec& job) {
  capnp::MallocMessageBuilder b(128);
  codec::PutJob(b.initRoot<schema::Job>(), job);
  kj::Array<capnp::word> words = capnp::messageToFlatArray(b);
  return std::string(reinterpret_cast<const char*>(words.begin()), words.size() * sizeof(capnp::word));
}

Result<JobSpec> DecodeJobBytes(const std::string& bytes) {
  if (bytes.size() % sizeof(capnp::word) != 0) return Status::InvalidArgument("job: not whole words");
  // Copied into words: the string's bytes need not be word-aligned.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  try {
    capnp::FlatArrayMessageReader reader(words, codec::ReaderLimits(bytes.size()));
    return codec::GetJob(reader.getRoot<schema::Job>());
  } catch (const kj::Exception& e) {
    return Status::InvalidArgument(std::string("malformed job: ") + e.getDescription().cStr());
  }
}

}  // namespace ferry::wire
