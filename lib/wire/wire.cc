// The wire codec: plain structs <-> Cap'n Proto messages <-> frames. The only place
// (with batch_message.cc) where generated accessors appear.
#include "ferry/internal/wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <cstdlib>
#include <fstream>
#include <kj/exception.h>
#include <mutex>
#include <sstream>

#include "ferry.capnp.h"
#include "wire/decode.h"
#include "wire/out_frame.h"

namespace ferry::internal {

namespace schema = ::ferry::wire::schema;
using codec::Build;
using codec::Decode;
using codec::Str;

static_assert(uint16_t(MessageType::kBatch) == uint16_t(schema::MessageType::BATCH));
static_assert(uint16_t(MessageType::kError) == uint16_t(schema::MessageType::ERROR));
static_assert(uint16_t(MessageType::kChallenge) == uint16_t(schema::MessageType::CHALLENGE));
static_assert(kProtocolVersion == schema::PROTOCOL_VERSION);

// ---------------------------------------------------------------------------------
// OutFrame

OutFrame::Impl::Impl(MessageType type, std::unique_ptr<capnp::MessageBuilder> builder, std::shared_ptr<void> keep)
    : type_(type), keep_(std::move(keep)), builder_(std::move(builder)) {
  Seal();
}

void OutFrame::Impl::Seal() {
  const kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments = builder_->getSegmentsForOutput();
  // Standard stream framing: (count - 1), sizes, padding to a word.
  table_.assign((segments.size() + 2) & ~size_t{1}, 0);
  table_[0] = uint32_t(segments.size() - 1);
  size_t body = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    table_[i + 1] = uint32_t(segments[i].size());
    body += segments[i].size() * sizeof(capnp::word);
  }
  const size_t table_bytes = table_.size() * sizeof(uint32_t);
  EncodeFrameHeader(type_, table_bytes + body, header_);
  ranges_.clear();
  ranges_.push_back({header_, kFrameHeaderSize});
  ranges_.push_back({table_.data(), table_bytes});
  for (const auto& s : segments) ranges_.push_back({s.begin(), s.size() * sizeof(capnp::word)});
  size_ = kFrameHeaderSize + table_bytes + body;
}

OutFrame::OutFrame() = default;
OutFrame::OutFrame(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OutFrame::OutFrame(OutFrame&&) noexcept = default;
OutFrame& OutFrame::operator=(OutFrame&&) noexcept = default;
OutFrame::~OutFrame() = default;
MessageType OutFrame::type() const { return impl_ ? impl_->type() : MessageType::kInvalid; }
const std::vector<ByteRange>& OutFrame::ranges() const {
  static const std::vector<ByteRange> kEmpty;
  return impl_ ? impl_->ranges() : kEmpty;
}
size_t OutFrame::size() const { return impl_ ? impl_->size() : 0; }

// ---------------------------------------------------------------------------------
// Receive buffers

namespace {

class HeapBuffer : public InBuffer {
 public:
  HeapBuffer(void* p, size_t n, size_t cap) : p_(p), n_(n), cap_(cap) {}
  ~HeapBuffer() override;
  uint8_t* data() override { return static_cast<uint8_t*>(p_); }
  size_t size() const override { return n_; }
  size_t capacity() const { return cap_; }
  void* release() {
    void* p = p_;
    p_ = nullptr;
    return p;
  }

 private:
  void* p_;
  size_t n_, cap_;
};

HeapBuffer::~HeapBuffer() { std::free(p_); }

// Recycles a few buffers by size class so that steady streaming allocates nothing.
class DefaultAllocator : public BufferAllocator, public std::enable_shared_from_this<DefaultAllocator> {
 public:
  std::shared_ptr<InBuffer> Allocate(size_t bytes) override {
    const size_t cap = RoundUp(std::max<size_t>(bytes, 64));
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i].second == cap) {
          p = free_[i].first;
          free_.erase(free_.begin() + long(i));
          break;
        }
      }
    }
    if (p == nullptr) p = std::aligned_alloc(64, cap);
    if (p == nullptr) return nullptr;
    std::weak_ptr<DefaultAllocator> weak = weak_from_this();
    auto* raw = new HeapBuffer(p, bytes, cap);
    return std::shared_ptr<InBuffer>(raw, [weak](InBuffer* b) {
      auto* hb = static_cast<HeapBuffer*>(b);
      if (auto self = weak.lock()) self->Recycle(hb->release(), hb->capacity());
      delete hb;
    });
  }

  ~DefaultAllocator() override {
    for (auto& f : free_) std::free(f.first);
  }

 private:
  static size_t RoundUp(size_t n) {
    size_t c = 4096;
    while (c < n) c *= 2;
    return c;
  }
  void Recycle(void* p, size_t cap) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < 16) {
      free_.push_back({p, cap});
    } else {
      std::free(p);
    }
  }
  std::mutex mu_;
  std::vector<std::pair<void*, size_t>> free_;  // GUARDED_BY(mu_)
};

class UserBuffer : public InBuffer {
 public:
  UserBuffer(void* p, size_t n, std::function<void(void*, size_t)> free) : p_(p), n_(n), free_(std::move(free)) {}
  ~UserBuffer() override { free_(p_, n_); }
  uint8_t* data() override { return static_cast<uint8_t*>(p_); }
  size_t size() const override { return n_; }

 private:
  void* p_;
  size_t n_;
  std::function<void(void*, size_t)> free_;
};

class FunctionAllocator : public BufferAllocator {
 public:
  FunctionAllocator(std::function<void*(size_t)> a, std::function<void(void*, size_t)> f)
      : alloc_(std::move(a)), free_(std::move(f)) {}
  std::shared_ptr<InBuffer> Allocate(size_t bytes) override {
    void* p = alloc_(bytes);
    if (p == nullptr || (reinterpret_cast<uintptr_t>(p) & 63) != 0) {
      if (p) free_(p, bytes);
      return nullptr;
    }
    return std::make_shared<UserBuffer>(p, bytes, free_);
  }

 private:
  std::function<void*(size_t)> alloc_;
  std::function<void(void*, size_t)> free_;
};

}  // namespace

std::shared_ptr<BufferAllocator> DefaultBufferAllocator() { return std::make_shared<DefaultAllocator>(); }

std::shared_ptr<BufferAllocator> FunctionBufferAllocator(std::function<void*(size_t)> alloc,
                                                         std::function<void(void*, size_t)> free) {
  return std::make_shared<FunctionAllocator>(std::move(alloc), std::move(free));
}

// ---------------------------------------------------------------------------------
// Encoding

namespace {

kj::ArrayPtr<const kj::byte> Bytes(const std::string& s) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}

std::string Str(capnp::Data::Reader d) { return std::string(reinterpret_cast<const char*>(d.begin()), d.size()); }

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
  });
}

OutFrame EncodeHelloOk(const std::string& server_id) {
  return Build(MessageType::kHelloOk,
               [&](capnp::MessageBuilder& b) { b.initRoot<schema::HelloOk>().setServerId(server_id); });
}

OutFrame EncodeOpenStream(const OpenStreamMsg& m) {
  return Build(MessageType::kOpenStream, [&](capnp::MessageBuilder& b) {
    auto r = b.initRoot<schema::OpenStream>();
    if (m.by_name) {
      r.getJob().setName(m.job_name);
    } else {
      auto j = r.getJob().initInline();
      j.setDatasetPath(m.job.dataset_path);
      j.setPipelineJson(m.job.pipeline_json);
      j.setSeed(m.job.seed);
      j.setShuffle(m.job.shuffle);
      j.setEpochs(m.job.epochs);
      j.setFirstEpoch(m.job.first_epoch);
      j.setBatchSize(m.job.batch_size);
      j.setLastBatch(schema::LastBatch(uint16_t(m.job.last_batch)));
      j.setWorkerIndex(m.job.worker_index);
      j.setNumWorkers(m.job.num_workers);
      j.setFingerprint(m.job.fingerprint);
    }
    r.setConsumerId(m.consumer_id);
    r.setCredits(m.credits);
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
    return m;
  });
}

Result<std::string> DecodeHelloOk(const InFrame& f) {
  return Decode<schema::HelloOk>(f, MessageType::kHelloOk,
                                 [](schema::HelloOk::Reader r) -> Result<std::string> { return Str(r.getServerId()); });
}

Result<OpenStreamMsg> DecodeOpenStream(const InFrame& f) {
  return Decode<schema::OpenStream>(f, MessageType::kOpenStream, [](schema::OpenStream::Reader r) -> Result<OpenStreamMsg> {
    OpenStreamMsg m;
    auto job = r.getJob();
    if (job.isName()) {
      m.by_name = true;
      m.job_name = Str(job.getName());
    } else {
      auto j = job.getInline();
      m.job.dataset_path = Str(j.getDatasetPath());
      m.job.pipeline_json = Str(j.getPipelineJson());
      m.job.seed = j.getSeed();
      m.job.shuffle = j.getShuffle();
      m.job.epochs = j.getEpochs();
      m.job.first_epoch = j.getFirstEpoch();
      m.job.batch_size = j.getBatchSize();
      const uint16_t lb = uint16_t(j.getLastBatch());
      if (lb > uint16_t(WireLastBatch::kKeep)) return Status::InvalidArgument("OpenStream: unknown last-batch policy");
      m.job.last_batch = WireLastBatch(lb);
      m.job.worker_index = j.getWorkerIndex();
      m.job.num_workers = j.getNumWorkers();
      m.job.fingerprint = j.getFingerprint();
    }
    m.consumer_id = Str(r.getConsumerId());
    m.credits = r.getCredits();
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

Result<TensorView> ReadTensor(schema::Tensor::Reader t, const char* name, int rank) {
  TensorView v;
  const uint16_t dt = uint16_t(t.getDtype());
  if (dt > uint16_t(DType::kFloat32)) return Status::InvalidArgument(std::string("Batch: ") + name + ": unknown dtype");
  v.dtype = DType(dt);
  auto shape = t.getShape();
  if (int(shape.size()) != rank)
    return Status::InvalidArgument(std::string("Batch: ") + name + ": expected rank " + std::to_string(rank));
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
  r.setLastInEpoch(in.provenance.last_in_epoch);
  r.setValid(in.valid);
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
  auto sk = r.initSkipped(unsigned(in.skipped.size()));
  for (unsigned i = 0; i < in.skipped.size(); ++i) {
    sk[i].setIndex(in.skipped[i].index);
    sk[i].setPath(in.skipped[i].path);
    sk[i].setReason(in.skipped[i].reason);
  }
  return OutFrame(std::make_unique<OutFrame::Impl>(MessageType::kBatch, std::move(builder), in.owner));
}

Result<Batch> DecodeBatch(const InFrame& f, std::vector<SkippedSample>* skipped) {
  return Decode<schema::Batch>(f, MessageType::kBatch, [&](schema::Batch::Reader r) -> Result<Batch> {
    Batch b;
    FERRY_ASSIGN_OR_RETURN(b.images, ReadTensor(r.getImages(), "images", 4));
    FERRY_ASSIGN_OR_RETURN(b.labels, ReadTensor(r.getLabels(), "labels", 1));
    FERRY_ASSIGN_OR_RETURN(b.indices, ReadTensor(r.getIndices(), "indices", 1));
    if (b.images.dtype == DType::kInt64 || b.labels.dtype != DType::kInt64 || b.indices.dtype != DType::kInt64)
      return Status::InvalidArgument("Batch: wrong tensor dtypes");
    const int64_t rows = b.labels.shape[0];
    if (b.images.shape[0] != rows || b.indices.shape[0] != rows)
      return Status::InvalidArgument("Batch: tensors disagree on the number of rows");
    b.valid = r.getValid();
    if (b.valid < 0 || b.valid > rows) return Status::InvalidArgument("Batch: valid rows out of range");
    b.provenance.epoch = r.getEpoch();
    b.provenance.split = r.getSplit();
    b.provenance.batch_in_split = r.getBatchInSplit();
    b.provenance.batches_in_split = r.getBatchesInSplit();
    b.provenance.batch_in_epoch = r.getBatchInEpoch();
    b.provenance.last_in_epoch = r.getLastInEpoch();
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
// Authentication

std::string HelloMac(const std::string& token, const std::string& nonce) {
  const std::string msg = "ferry-hello-v1" + nonce;
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), int(token.size()), reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
       out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

bool MacEquals(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string RandomNonce() {
  std::string n(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), int(n.size())) != 1) std::abort();
  return n;
}

Result<std::string> LoadToken(const std::string& token_file) {
  std::string token;
  if (!token_file.empty()) {
    std::ifstream f(token_file, std::ios::binary);
    if (!f) return Status::NotFound("cannot read token file " + token_file);
    std::stringstream ss;
    ss << f.rdbuf();
    token = ss.str();
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
    if (token.empty()) return Status::InvalidArgument("token file " + token_file + " is empty");
    return token;
  }
  if (const char* env = std::getenv("FERRY_TOKEN")) token = env;
  return token;
}

}  // namespace ferry::internal
