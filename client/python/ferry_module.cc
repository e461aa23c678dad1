// ferry._ferry: the C++ side of the Python binding. The Python package (ferry/
// __init__.py) builds ferry.Loader and ferry.DataLoader on it.
//
// An Iterator wraps either the in-process Loader or the remote Client. next() waits
// with the GIL released, in slices of 200 ms between which it checks for signals, so
// Ctrl-C raises KeyboardInterrupt within 0.2 s. Each batch comes back as numpy arrays
// that view the batch buffer (no copy); each array's base is a capsule holding the
// batch's keepalive, so the buffer lives as long as any array (or a torch tensor made
// from one with torch.from_numpy) does.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu_set.h"
#include "data/dataset.h"
#include "ferry/client.h"
#include "ferry/loader.h"
#include "ferry/pipeline_spec.h"
#include "ops/kernels/pixels.h"
#include "ops/pipeline.h"
#include "net/auth.h"
#include "server/worker_service.h"

namespace py = pybind11;

namespace ferry {
namespace {

// Errors carry the Status message; the code picks the Python exception type.
[[noreturn]] void Raise(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      throw py::value_error(s.ToString());
    case StatusCode::kNotFound:
      throw py::value_error(s.ToString());
    default:
      throw std::runtime_error(s.ToString());
  }
}

template <typename T>
T Check(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(*r);
}

// C-order strides in bytes, worked out here: pybind11 2.10 (Debian 12's) reads a dtype's
// item size from numpy 1's PyArray_Descr layout, which numpy 2 changed, so an array
// made with empty strides gets wrong ones under numpy 2 (a current torch's).
std::vector<py::ssize_t> CStrides(const std::vector<py::ssize_t>& shape, py::ssize_t item) {
  std::vector<py::ssize_t> strides(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = item;
    item *= shape[i];
  }
  return strides;
}

py::array View(const TensorView& t, const std::shared_ptr<void>& keepalive) {
  // The capsule owns a copy of the keepalive: the buffer outlives the array.
  auto* hold = new std::shared_ptr<void>(keepalive);
  py::capsule base(hold, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.begin() + t.rank);
  py::dtype dtype = t.dtype == DType::kUint8     ? py::dtype::of<uint8_t>()
                    : t.dtype == DType::kFloat32 ? py::dtype::of<float>()
                    : t.dtype == DType::kInt32   ? py::dtype::of<int32_t>()
                                                 : py::dtype::of<int64_t>();
  // Read-write: torch.from_numpy refuses read-only arrays. The buffer is this batch's
  // alone; a trainer that writes into it harms nobody.
  return py::array(dtype, shape, CStrides(shape, py::ssize_t(DTypeSize(t.dtype))), const_cast<void*>(t.data), base);
}

// Float batches made on the trainer (normalize_nhwc, a pipeline's trainer half) come
// from a few kept buffers. A fresh batch-sized allocation (38 MB for 64 images of
// 224x224x3 float32) is past glibc's largest mmap threshold (32 MB), so every batch was
// mapped, faulted in and zeroed by the kernel, then unmapped: clear_page was 60% of a
// remote trainer's CPU. A buffer goes back to the pool when its array (and every
// tensor viewing it) is freed; the pool keeps kKeep and frees the rest.
class FloatPool {
 public:
  static FloatPool& Get() {
    static FloatPool* pool = new FloatPool;  // never destroyed: arrays may outlive exit's destructors
    return *pool;
  }
  // A writable float32 array of `shape` (C order) on a pooled buffer.
  py::array_t<float> Array(const std::vector<py::ssize_t>& shape) {
    size_t count = 1;
    for (py::ssize_t d : shape) count *= size_t(d);
    Buffer* b = Take(std::max<size_t>(count, 1));
    py::capsule base(b, [](void* v) { FloatPool::Get().Give(static_cast<Buffer*>(v)); });
    return py::array_t<float>(shape, b->data, base);
  }

 private:
  struct Buffer {
    float* data;
    size_t count;
  };
  static constexpr size_t kKeep = 3;
  Buffer* Take(size_t count) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i]->count == count) {
          Buffer* b = free_[i];
          free_.erase(free_.begin() + std::ptrdiff_t(i));
          return b;
        }
      }
    }
    void* p = std::aligned_alloc(64, (count * sizeof(float) + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    return new Buffer{static_cast<float*>(p), count};
  }
  void Give(Buffer* b) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (free_.size() < kKeep) {
        free_.push_back(b);
        return;
      }
    }
    std::free(b->data);
    delete b;
  }
  std::mutex mu_;
  std::vector<Buffer*> free_;
};

// How long a wait for a batch holds without checking for signals. 50 ms before: a
// trainer waiting on batches that take longer (a slow dataset of the user's own) woke
// once a batch for nothing, each wake with cold caches (measured: a tenth of an
// in-process loader's own CPU per batch with two Python processes).
constexpr double kWaitSlice = 0.2;

class PyIterator {
 public:
  explicit PyIterator(std::unique_ptr<BatchIterator> it) : it_(std::move(it)) {}

  // A dict with the batch, or None at the end.
  //
  // The wait holds a reference of its own: close() from another thread, or from a
  // signal handler that PyErr_CheckSignals() runs, drops the iterator's, and this wait
  // sees it within kWaitSlice and raises; the iterator is destroyed by whichever lets go
  // last, without the GIL (it joins its threads). It was destroyed under the wait
  // before: a segfault.
  py::object Next() {
    std::shared_ptr<BatchIterator> it = Live();
    std::optional<Result<Batch>> taken;
    for (;;) {
      {
        // A batch that is ready is taken in the same release of the GIL (a signal
        // that came meanwhile is Python's to raise once this returns, as between any
        // two calls).
        py::gil_scoped_release release;
        if (it->WaitReady(kWaitSlice)) taken.emplace(it->Next());
      }
      if (taken) break;
      if (PyErr_CheckSignals() != 0) {
        Release(std::move(it));
        throw py::error_already_set();
      }
      if (!it_) {
        Release(std::move(it));
        throw std::runtime_error("ferry: the loader was closed while this iteration waited for a batch");
      }
    }
    Release(std::move(it));
    Result<Batch>& b = *taken;
    if (!b.ok()) {
      if (b.status().IsOutOfRange()) return py::none();
      Raise(b.status());
    }
    py::dict d;
    // A user-code batch's images have no pixels: its tensors are in user_data.
    d["images"] = b->structure.empty() ? py::object(View(b->images, b->keepalive)) : py::object(py::none());
    d["labels"] = View(b->labels, b->keepalive);
    d["indices"] = View(b->indices, b->keepalive);
    if (b->targets.rank == 2) d["targets"] = View(b->targets, b->keepalive);
    if (!b->fields.empty()) {
      // name -> (values, offsets or None): views, like the tensors.
      py::dict fields;
      for (const BatchField& f : b->fields)
        fields[py::str(f.name)] = py::make_tuple(View(f.values, b->keepalive),
                                                 f.ragged() ? py::object(View(f.offsets, b->keepalive)) : py::none());
      d["fields"] = fields;
    }
    if (!b->structure.empty()) {
      // User code: the collated batch's bytes (a view) and how to rebuild it.
      d["structure"] = py::str(b->structure);
      d["user_data"] = View(b->user_data, b->keepalive);
    }
    d["valid"] = b->valid;
    d["epoch"] = b->provenance.epoch;
    d["batch_in_epoch"] = b->provenance.batch_in_epoch;
    d["last_in_epoch"] = b->provenance.last_in_epoch;
    d["split"] = b->provenance.split;
    d["batch_in_split"] = b->provenance.batch_in_split;
    d["batches_in_split"] = b->provenance.batches_in_split;
    d["batches_in_epoch"] = b->provenance.batches_in_epoch;
    d["buffer"] = py::make_tuple(reinterpret_cast<uintptr_t>(b->buffer), b->buffer_size);
    return d;
  }

  std::vector<py::tuple> TakeSkipped() {
    std::vector<py::tuple> out;
    for (const SkippedSample& s : Live()->TakeSkipped()) out.push_back(py::make_tuple(s.index, s.path, s.reason));
    return out;
  }

  py::dict Stats() const {
    const IteratorStats s = Live()->stats();
    py::dict d;
    d["batches"] = s.batches;
    d["samples"] = s.samples;
    d["skipped"] = s.skipped;
    d["wait_seconds"] = s.wait_seconds;
    return d;
  }

  // The serialized state; `unyield`: batches (epoch, split, batch_in_split,
  // batches_in_split) the client yielded that the trainer never got.
  std::string State(const std::vector<std::tuple<uint64_t, int64_t, int64_t, int64_t>>& unyield) const {
    const std::shared_ptr<BatchIterator> keep = Live();  // while the GIL is released below
    auto* c = dynamic_cast<Client*>(keep.get());
    if (c == nullptr) throw py::type_error("only a dispatcher client has a serialized state");
    IteratorState st = c->SaveState();
    if (!unyield.empty()) {
      std::optional<JobSpec> job;
      {
        py::gil_scoped_release release;
        job = c->JobInfo(30.0);
      }
      if (!job) throw std::runtime_error("the dispatcher did not describe the job");
      for (const auto& [epoch, split, batch, batches] : unyield) {
        BatchProvenance p;
        p.epoch = epoch;
        p.split = split;
        p.batch_in_split = batch;
        p.batches_in_split = batches;
        const Status s = st.Unyield(p, job->SplitsPerEpoch());
        if (!s.ok()) Raise(s);
      }
    }
    return st.Serialize();
  }

  int64_t BatchesPerEpoch() const {
    if (auto* l = dynamic_cast<Loader*>(Live().get())) return l->batches_per_epoch();
    return -1;
  }

  int64_t DatasetSize() const {
    if (auto* l = dynamic_cast<Loader*>(Live().get())) return l->dataset_size();
    return -1;
  }

  // Dispatcher mode: the job's sample count (waits up to `seconds` for the dispatcher).
  int64_t JobSamples(double seconds) const {
    const std::shared_ptr<BatchIterator> keep = Live();  // while the GIL is released below
    auto* c = dynamic_cast<Client*>(keep.get());
    if (c == nullptr) return -1;
    std::optional<JobSpec> info;
    {
      py::gil_scoped_release release;
      info = c->JobInfo(seconds);
    }
    return info ? info->num_samples : -1;
  }

  void Close() { Release(std::move(it_)); }

 private:
  // The iterator, or RuntimeError once closed.
  std::shared_ptr<BatchIterator> Live() const {
    if (!it_) throw std::runtime_error("ferry: the loader is closed");
    return it_;
  }
  // Drops a reference without the GIL: the last one destroys the iterator, which joins
  // its threads and may wait for its connections to close.
  static void Release(std::shared_ptr<BatchIterator> it) {
    py::gil_scoped_release release;
    it.reset();
  }

  std::shared_ptr<BatchIterator> it_;  // null once closed
};

LastBatch ToLastBatch(const std::string& s) { return Check(ParseLastBatch(s)); }

PipelineSpec ToSpec(const std::string& pipeline) { return Check(PipelineSpec::Parse(pipeline)); }

// Options come from Python as a dict; every key must be known (a misspelt option is an
// error, not a silent default), and each is taken with its C++ type.
class Options {
 public:
  explicit Options(const py::dict& d) {
    for (auto item : d) keys_.emplace(py::cast<std::string>(item.first), py::reinterpret_borrow<py::object>(item.second));
  }
  template <typename T>
  void Get(const char* key, T* out) {
    auto it = keys_.find(key);
    if (it == keys_.end()) return;
    if (!it->second.is_none()) *out = it->second.cast<T>();
    keys_.erase(it);
  }
  // Call last: an error naming any key left over.
  void CheckAllUsed() const {
    if (keys_.empty()) return;
    std::string names;
    for (const auto& [k, v] : keys_) names += (names.empty() ? "" : ", ") + k;
    throw py::value_error("unknown option(s): " + names);
  }

 private:
  std::map<std::string, py::object> keys_;
};

// A BufferAllocator over cudaHostAlloc(void**, size_t, unsigned) -> int and
// cudaFreeHost(void*) -> int, given as addresses. cudaHostAlloc's memory is
// page-aligned (the 64 bytes a frame needs, and more).
std::shared_ptr<BufferAllocator> HostAllocator(uintptr_t alloc_fn, uintptr_t free_fn) {
  if (alloc_fn == 0 || free_fn == 0) throw py::value_error("host_alloc needs two function addresses");
  using AllocFn = int (*)(void**, size_t, unsigned);
  using FreeFn = int (*)(void*);
  const auto alloc = reinterpret_cast<AllocFn>(alloc_fn);
  const auto release = reinterpret_cast<FreeFn>(free_fn);
  return FunctionBufferAllocator(
      [alloc](size_t bytes) -> void* {
        void* p = nullptr;
        if (alloc(&p, bytes, 0) != 0 || p == nullptr || reinterpret_cast<uintptr_t>(p) % 64 != 0) return nullptr;
        return p;
      },
      [release](void* p, size_t) { release(p); });
}

// The job's keys: data, pipeline, batch_size, seed, shuffle, last_batch, bad_samples, epochs, targets,
// world_size (num_consumers), deterministic, sharing, weight, priority, batches_per_split, job_first_epoch,
// taken (a remainder job's [begin, end) pairs), num_samples (the listing's, where known),
// mixture ([(data, weight, pipeline or "")]) and mixture_epoch,
// tokenizer_model, tokenizer_length, tokenizer_add_bos, tokenizer_add_eos, tokenizer_pad_id.
JobSpec JobFrom(Options& o) {
  JobSpec job;
  std::string pipeline = "imagenet-train", last_batch = "drop", bad_samples = "skip", sharing = "splits";
  bool deterministic = false;
  o.Get("data", &job.dataset);
  o.Get("pipeline", &pipeline);
  o.Get("batch_size", &job.batch_size);
  o.Get("seed", &job.seed);
  o.Get("shuffle", &job.shuffle);
  o.Get("last_batch", &last_batch);
  o.Get("bad_samples", &bad_samples);
  o.Get("epochs", &job.epochs);
  o.Get("world_size", &job.num_consumers);
  o.Get("deterministic", &deterministic);
  o.Get("sharing", &sharing);
  o.Get("weight", &job.weight);
  o.Get("priority", &job.priority);
  o.Get("batches_per_split", &job.batches_per_split);
  o.Get("job_first_epoch", &job.first_epoch);
  o.Get("taken", &job.taken);
  o.Get("num_samples", &job.num_samples);
  o.Get("targets", &job.targets);
  o.Get("tokenizer_model", &job.tokenizer.model);
  o.Get("tokenizer_length", &job.tokenizer.length);
  o.Get("tokenizer_add_bos", &job.tokenizer.add_bos);
  o.Get("tokenizer_add_eos", &job.tokenizer.add_eos);
  o.Get("tokenizer_pad_id", &job.tokenizer.pad_id);
  o.Get("user_code", &job.user_code.payload);  // bytes: cloudpickle of (dataset, transform, collate_fn)
  o.Get("user_versions", &job.user_code.versions);
  o.Get("user_input", &job.user_code.input);  // "pil", "uint8", "float": Python steps after the pipeline
  std::vector<std::tuple<std::string, double, std::string>> mixture;  // (data, weight, pipeline or "")
  o.Get("mixture", &mixture);
  o.Get("mixture_epoch", &job.mixture_epoch);
  for (const auto& [data, weight, own] : mixture)
    job.mixture.push_back({data, weight, own.empty() ? "" : ToSpec(own).ToJson(), 0});
  job.pipeline = ToSpec(pipeline);
  job.last_batch = ToLastBatch(last_batch);
  job.bad_samples = Check(ParseBadSamples(bad_samples));
  job.ordering = deterministic ? Ordering::kDeterministic : Ordering::kArrival;
  if (sharing != "splits" && sharing != "every")
    throw py::value_error("sharing must be \"splits\" (the consumers split each epoch) or \"every\" (a sweep: "
                          "every trainer takes every batch), not \"" + sharing.substr(0, 32) + "\"");
  job.sharing = sharing == "every" ? Sharing::kEvery : Sharing::kSplits;
  return job;
}

// In-process: the job's keys, and rank, threads, prefetch, first_epoch, resume_batches.
std::unique_ptr<PyIterator> OpenLocal(const py::dict& options) {
  Options in(options);
  LoaderOptions o;
  o.job = JobFrom(in);
  o.job.ordering = Ordering::kArrival;  // one producer: always in order
  in.Get("rank", &o.rank);
  in.Get("threads", &o.threads);
  in.Get("prefetch", &o.prefetch);
  in.Get("first_epoch", &o.first_epoch);
  in.Get("resume_batches", &o.resume_batches);
  in.Get("python", &o.python.python);
  in.Get("python_processes", &o.python.processes);
  in.Get("sample_timeout", &o.python.sample_timeout_s);
  in.CheckAllUsed();
  std::unique_ptr<Loader> l;
  {
    py::gil_scoped_release release;  // listing a large tree takes a while
    l = Check(Loader::Open(o));
  }
  return std::make_unique<PyIterator>(std::move(l));
}

// Remote: the job's keys, and rank, workers, dispatcher, job_name, first_epoch,
// credits, token_file, consumer_id, resume_state, io_cpus.
std::unique_ptr<PyIterator> Connect(const py::dict& options) {
  Options in(options);
  ClientOptions o;
  o.job = JobFrom(in);
  in.Get("rank", &o.rank);
  in.Get("workers", &o.workers);
  in.Get("dispatcher", &o.dispatcher);
  in.Get("job_name", &o.job_name);
  in.Get("first_epoch", &o.first_epoch);
  in.Get("credits", &o.credits);
  in.Get("token_file", &o.token_file);
  in.Get("consumer_id", &o.consumer_id);
  in.Get("trainer_id", &o.trainer_id);
  in.Get("resume_state", &o.resume_state);
  // Receive buffers from C functions with cudaHostAlloc's and cudaFreeHost's
  // signatures (addresses, as ctypes gives them): pinned memory, so that a batch is
  // copied to the GPU straight from where it was received.
  std::optional<std::pair<uintptr_t, uintptr_t>> host_alloc;
  in.Get("host_alloc", &host_alloc);
  if (host_alloc) o.buffers = HostAllocator(host_alloc->first, host_alloc->second);
  std::string io_cpus;
  in.Get("io_cpus", &io_cpus);
  if (!io_cpus.empty()) o.io_cpus = Check(ParseCpuList(io_cpus));
  in.CheckAllUsed();
  std::unique_ptr<Client> c;
  {
    py::gil_scoped_release release;
    c = Check(Client::Connect(o));
  }
  return std::make_unique<PyIterator>(std::move(c));
}

// Elastic resume: the batches j of `epoch` that rank `rank` of `job` yielded, per its
// serialized dispatcher state.
std::vector<int64_t> YieldedBatches(const py::dict& job, const std::string& state, int64_t rank, uint64_t epoch) {
  Options in(job);
  const JobSpec spec = JobFrom(in);
  in.CheckAllUsed();
  const IteratorState st = Check(IteratorState::Parse(state));
  return Check(st.YieldedBatches(spec, rank, epoch));
}

// Elastic resume: the positions of an epoch's order the ranks of `job` yielded
// (yielded[r]: rank r's batches j), as the `taken` of the remainder job.
std::vector<std::pair<int64_t, int64_t>> Taken(const py::dict& job, const std::vector<std::vector<int64_t>>& yielded) {
  Options in(job);
  const JobSpec spec = JobFrom(in);
  in.CheckAllUsed();
  return Check(TakenPositions(spec, yielded));
}

// Batches each of `world_size` ranks gets an epoch of `num_samples` (world_size 1: the
// one consumer's batches), as the job's geometry has it.
int64_t BatchesPerRank(int64_t num_samples, int batch_size, int world_size, const std::string& last_batch) {
  JobSpec job;
  job.num_samples = num_samples;
  job.batch_size = batch_size;
  job.num_consumers = world_size;
  job.last_batch = ToLastBatch(last_batch);
  return job.RankBatches();
}

// The listing Ferry uses for a dataset: (paths, labels, classes), for comparisons
// with torchvision.datasets.ImageFolder.
py::tuple ListDataset(const std::string& data) {
  std::unique_ptr<Dataset> ds;
  {
    py::gil_scoped_release release;
    ds = Check(OpenDataset(data));
  }
  std::vector<std::string> paths;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < ds->size(); ++i) {
    paths.push_back(ds->Path(i));
    labels.push_back(ds->Label(i));
  }
  return py::make_tuple(paths, labels, ds->classes());
}

// Hybrid: a worker in this process, on `threads` of the trainer's own cores, that
// joins a dispatcher job and leases only one consumer's splits (see WorkerOptions).
class PyLocalWorker {
 public:
  explicit PyLocalWorker(const py::dict& d) {
    Options in(d);
    WorkerOptions o;
    std::string token_file;
    in.Get("dispatcher", &o.dispatcher);
    in.Get("job_name", &o.serves_job);
    in.Get("consumer_id", &o.serves_consumer);
    in.Get("threads", &o.threads);
    in.Get("token_file", &token_file);
    in.Get("listen", &o.listen);
    in.CheckAllUsed();
    if (o.threads <= 0) throw py::value_error("local_threads must be > 0");
    py::gil_scoped_release release;
    o.token = Check(net::LoadToken(token_file));
    o.id = "ferry-local-worker";
    service_ = Check(WorkerService::Start(o));
  }
  std::string Address() const { return service_ ? service_->address() : ""; }
  int64_t BatchesSent() const { return service_ ? service_->stats().batches_sent : 0; }
  void Close() {
    py::gil_scoped_release release;
    if (service_) service_->Leave();  // its splits go back to the job now
    service_.reset();
  }

 private:
  std::unique_ptr<WorkerService> service_;
};

// A pipeline (preset name, JSON, or .json file) compiled, in its canonical JSON form
// (every op's parameters spelled out); errors name the op and the parameter.
std::string PipelineJson(const std::string& pipeline) {
  const PipelineSpec spec = Check(PipelineSpec::Parse(pipeline));
  return Check(Pipeline::Compile(spec))->canonical().ToJson();
}

// A compiled pipeline, for the trainer's share of the work when uint8 travels
// (finish), for tests and tools that run it on one encoded image (process), and to
// describe it (the spec the workers run, the output shape, the classes of its targets).
class PyPipeline {
 public:
  explicit PyPipeline(const std::string& pipeline)
      : p_(Check(Pipeline::Compile(Check(PipelineSpec::Parse(pipeline))))) {}

  std::string Canonical() const { return p_->canonical().ToJson(); }
  std::string ImageSpec() const { return p_->ImageSpec().ToJson(); }
  py::tuple Shape() const {
    const auto s = p_->output_shape();
    return py::make_tuple(s.height, s.width, s.channels);
  }
  int NumClasses() const { return p_->num_classes(); }
  bool HasTrainerOps() const { return p_->has_tensor_ops() || p_->has_batch_ops(); }
  std::vector<std::string> Steps() const { return p_->step_names(); }

  // One encoded image through the whole pipeline: the output row (uint8 H x W x C or
  // float32 C x H x W), or ValueError with the reason a worker would report.
  py::array Process(py::bytes encoded, uint64_t seed, uint64_t epoch, int64_t index) const {
    std::string data = encoded;
    const auto s = p_->output_shape();
    std::vector<py::ssize_t> shape = p_->dtype() == DType::kUint8
                                         ? std::vector<py::ssize_t>{s.height, s.width, s.channels}
                                         : std::vector<py::ssize_t>{s.channels, s.height, s.width};
    const bool u8 = p_->dtype() == DType::kUint8;
    py::array out(u8 ? py::dtype::of<uint8_t>() : py::dtype::of<float>(), shape, CStrides(shape, u8 ? 1 : 4));
    Status st;
    void* dst = out.mutable_data();
    {
      py::gil_scoped_release release;
      st = p_->Process(data, seed, epoch, index, dst);
    }
    if (!st.ok()) throw py::value_error(st.ToString());
    return out;
  }

  // The random parameters the ops draw for one sample, [(name, value)] in draw order
  // (lib/ops/record.h), and the status of processing it.
  py::tuple Draws(py::bytes encoded, uint64_t seed, uint64_t epoch, int64_t index) const {
    std::string data = encoded;
    std::vector<uint8_t> out(p_->sample_bytes());
    DrawLog log;
    Status st;
    {
      py::gil_scoped_release release;
      ScopedDrawLog scope(&log);
      st = p_->Process(data, seed, epoch, index, out.data());
    }
    return py::make_tuple(log.draws, st.ok() ? std::string() : st.ToString());
  }

  // The trainer's share: uint8 NHWC rows (of the image spec) -> (float32 NCHW, targets
  // or None): normalize, the tensor ops of each valid row, the batch ops. The GIL is
  // released while it runs.
  py::tuple Finish(py::array_t<uint8_t, py::array::c_style> images, py::array_t<int64_t, py::array::c_style> indices,
                   py::array_t<int64_t, py::array::c_style> labels, int64_t valid, uint64_t seed, uint64_t epoch,
                   int64_t batch_in_epoch, bool record) const {
    const auto s = p_->output_shape();
    if (images.ndim() != 4 || images.shape(1) != s.height || images.shape(2) != s.width || images.shape(3) != s.channels)
      throw py::value_error("finish wants uint8 N x H x W x C rows of the pipeline's image spec");
    const int64_t rows = images.shape(0);
    if (indices.size() != rows || labels.size() != rows || valid < 0 || valid > rows)
      throw py::value_error("finish wants one index and one label per row, and valid <= rows");
    py::array_t<float> out =
        FloatPool::Get().Array({py::ssize_t(rows), py::ssize_t(s.channels), py::ssize_t(s.height), py::ssize_t(s.width)});
    py::object targets = py::none();
    float* t = nullptr;
    if (p_->num_classes() > 0) {
      py::array_t<float> tt({py::ssize_t(rows), py::ssize_t(p_->num_classes())});
      t = tt.mutable_data();
      targets = tt;
    }
    const uint8_t* in = images.data();
    const int64_t* idx = indices.data();
    const int64_t* lab = labels.data();
    float* o = out.mutable_data();
    DrawLog log;
    {
      py::gil_scoped_release release;
      ScopedDrawLog scope(record ? &log : nullptr);
      p_->FinishOnTrainer(in, rows, valid, idx, lab, seed, epoch, Pipeline::BatchKey(batch_in_epoch, idx, valid), o,
                          t);
    }
    if (record) return py::make_tuple(out, targets, log.draws);
    return py::make_tuple(out, targets);
  }

  // The same batch's finish as a plan for the trainer's GPU (Pipeline::PlanOnTrainer):
  // {"scale", "bias": per channel, "erase_rows": int64 [E], "erase_boxes": int32 [E, 4]
  // (top, left, height, width), "erase_fills": E float32 arrays (C values, or C x h x w),
  // "mixed", "cutmix", "flip_partner", "lam", "box": (x1, y1, x2, y2), "targets":
  // float32 [rows, K] or None}; None when the pipeline cannot be finished that way.
  py::object Plan(py::array_t<int64_t, py::array::c_style> indices, py::array_t<int64_t, py::array::c_style> labels,
                  int64_t valid, uint64_t seed, uint64_t epoch, int64_t batch_in_epoch) const {
    const int64_t rows = indices.size();
    if (labels.size() != rows || valid < 0 || valid > rows)
      throw py::value_error("plan wants one index and one label per row, and valid <= rows");
    // Strides given (CStrides): pybind11 2.10 works them out wrong under numpy 2.
    py::object targets = py::none();
    float* t = nullptr;
    if (p_->num_classes() > 0) {
      const std::vector<py::ssize_t> shape = {py::ssize_t(rows), py::ssize_t(p_->num_classes())};
      py::array_t<float> tt(shape, CStrides(shape, sizeof(float)));
      t = tt.mutable_data();
      targets = tt;
    }
    std::vector<std::pair<int64_t, ErasePlan>> erases;
    MixPlan batch;
    const int64_t* idx = indices.data();
    if (!p_->PlanOnTrainer(rows, valid, idx, labels.data(), seed, epoch, Pipeline::BatchKey(batch_in_epoch, idx, valid),
                           &erases, &batch, t))
      return py::none();
    const int channels = p_->output_shape().channels;
    const std::vector<py::ssize_t> n = {py::ssize_t(erases.size())}, n4 = {py::ssize_t(erases.size()), 4};
    py::array_t<int64_t> erase_rows(n, CStrides(n, sizeof(int64_t)));
    py::array_t<int32_t> erase_boxes(n4, CStrides(n4, sizeof(int32_t)));
    int64_t* row_at = erase_rows.mutable_data();
    int32_t* box = erase_boxes.mutable_data();
    py::list fills;
    for (size_t k = 0; k < erases.size(); ++k) {
      const ErasePlan& e = erases[k].second;
      row_at[k] = erases[k].first;
      box[4 * k] = e.top, box[4 * k + 1] = e.left, box[4 * k + 2] = e.height, box[4 * k + 3] = e.width;
      const std::vector<py::ssize_t> len = {py::ssize_t(e.fill.size())};
      py::array_t<float> fill(len, CStrides(len, sizeof(float)));
      std::copy(e.fill.begin(), e.fill.end(), fill.mutable_data());
      fills.append(fill);
    }
    py::dict d;
    d["scale"] = std::vector<float>(p_->float_scale(), p_->float_scale() + channels);
    d["bias"] = std::vector<float>(p_->float_bias(), p_->float_bias() + channels);
    d["erase_rows"] = erase_rows;
    d["erase_boxes"] = erase_boxes;
    d["erase_fills"] = fills;
    d["mixed"] = batch.mixed;
    d["cutmix"] = batch.cutmix;
    d["flip_partner"] = batch.flip_partner;
    d["lam"] = batch.lam;
    d["box"] = py::make_tuple(batch.x1, batch.y1, batch.x2, batch.y2);
    d["targets"] = targets;
    return d;
  }

 private:
  std::shared_ptr<const Pipeline> p_;
};

// The trainer's half of a normalizing pipeline whose uint8 NHWC batch crossed the
// wire: float32 NCHW (x/255 - mean)/std, by the very code (and arithmetic) a worker's
// float32 output uses, so the result is the same, bit for bit; the GIL is released.
py::array_t<float> NormalizeNHWC(py::array_t<uint8_t, py::array::c_style> images, std::vector<float> mean,
                                 std::vector<float> std) {
  if (images.ndim() != 4 || (images.shape(3) != 3 && images.shape(3) != 1))
    throw py::value_error("normalize wants uint8 N x H x W x C (C = 1 or 3)");
  if (mean.size() != size_t(images.shape(3)) || std.size() != mean.size())
    throw py::value_error("normalize wants one mean and one std per channel");
  const py::ssize_t n = images.shape(0), h = images.shape(1), w = images.shape(2), c = images.shape(3);
  float scale[3], bias[3];
  for (size_t k = 0; k < mean.size(); ++k) {
    if (!(std[k] > 0)) throw py::value_error("normalize std must be > 0");
    scale[k] = 1.f / (255.f * std[k]);
    bias[k] = -mean[k] / std[k];
  }
  py::array_t<float> out = FloatPool::Get().Array({n, c, h, w});
  const uint8_t* in = images.data();
  float* o = out.mutable_data();
  {
    py::gil_scoped_release release;
    const size_t pixels = size_t(h) * size_t(w) * size_t(c);
    for (py::ssize_t i = 0; i < n; ++i)
      kernels::WriteFloatCHW(in + size_t(i) * pixels, size_t(w) * size_t(c), int(h), int(w), int(c), false, scale,
                             bias, o + size_t(i) * pixels);
  }
  return out;
}

std::vector<std::string> Ops() { return RegisteredOps(); }

}  // namespace
}  // namespace ferry

PYBIND11_MODULE(_ferry, m) {
  using namespace ferry;
  m.doc() = "Ferry's C++ core (see the ferry package for the Python API)";
  py::class_<PyIterator>(m, "Iterator")
      .def("next", &PyIterator::Next, "the next batch as a dict of numpy views, or None at the end")
      .def("take_skipped", &PyIterator::TakeSkipped)
      .def("stats", &PyIterator::Stats)
      .def("state", &PyIterator::State, py::arg("unyield") = std::vector<std::tuple<uint64_t, int64_t, int64_t, int64_t>>{})
      .def("batches_per_epoch", &PyIterator::BatchesPerEpoch)
      .def("dataset_size", &PyIterator::DatasetSize)
      .def("job_samples", &PyIterator::JobSamples, py::arg("seconds") = 30.0)
      .def("close", &PyIterator::Close);
  m.def("open_local", &OpenLocal, py::arg("options"), "the in-process pipeline (options: a dict)");
  m.def("connect", &Connect, py::arg("options"), "a remote client (options: a dict)");
  m.def(
      "cpu_list",
      [](const std::string& s) {
        Result<std::vector<int>> cpus = ParseCpuList(s);
        if (cpus.ok()) {
          if (Status placeable = CheckPlaceable(*cpus, "io_cpus"); !placeable.ok()) Raise(placeable);
          return CpuListString(*cpus);
        }
        Raise(Status::InvalidArgument("io_cpus: " + cpus.status().message()));
        return std::string();
      },
      py::arg("cpus"), "a CPU list (taskset -c's form) checked and written canonically: ValueError if it is wrong");
  m.def("yielded_batches", &YieldedBatches, py::arg("job"), py::arg("state"), py::arg("rank"), py::arg("epoch"));
  m.def("taken_positions", &Taken, py::arg("job"), py::arg("yielded"));
  m.def("batches_per_rank", &BatchesPerRank, py::arg("num_samples"), py::arg("batch_size"), py::arg("world_size"),
        py::arg("last_batch"));
  m.def("list_dataset", &ListDataset, py::arg("data"));
  py::class_<PyLocalWorker>(m, "LocalWorker")
      .def(py::init<const py::dict&>(), py::arg("options"))
      .def("address", &PyLocalWorker::Address)
      .def("batches_sent", &PyLocalWorker::BatchesSent)
      .def("close", &PyLocalWorker::Close);
  m.def("pipeline_json", &PipelineJson, py::arg("pipeline"), "a pipeline in its canonical JSON form");
  m.def(
      "load_plugin", [](const std::string& path) { if (Status s = LoadPlugin(path); !s.ok()) Raise(s); }, py::arg("path"),
      "loads an op plugin (include/ferry/plugin.h) into this process");
  py::class_<PyPipeline>(m, "Pipeline")
      .def(py::init<const std::string&>(), py::arg("pipeline"))
      .def_property_readonly("canonical_json", &PyPipeline::Canonical)
      .def_property_readonly("image_spec_json", &PyPipeline::ImageSpec)
      .def_property_readonly("output_shape", &PyPipeline::Shape)
      .def_property_readonly("num_classes", &PyPipeline::NumClasses)
      .def_property_readonly("has_trainer_ops", &PyPipeline::HasTrainerOps)
      .def_property_readonly("steps", &PyPipeline::Steps)
      .def("process", &PyPipeline::Process, py::arg("encoded"), py::arg("seed") = 0, py::arg("epoch") = 0,
           py::arg("index") = 0)
      .def("draws", &PyPipeline::Draws, py::arg("encoded"), py::arg("seed") = 0, py::arg("epoch") = 0,
           py::arg("index") = 0, "([(parameter, value)] the ops drew, error or '') for one sample")
      .def("finish", &PyPipeline::Finish, py::arg("images"), py::arg("indices"), py::arg("labels"), py::arg("valid"),
           py::arg("seed"), py::arg("epoch"), py::arg("batch_in_epoch"), py::arg("record") = false,
           "(float32 images, targets[, draws when record]) of a uint8 batch")
      .def("plan", &PyPipeline::Plan, py::arg("indices"), py::arg("labels"), py::arg("valid"), py::arg("seed"),
           py::arg("epoch"), py::arg("batch_in_epoch"),
           "finish's work as a plan for the trainer's GPU (a dict), or None when it cannot be one");
  m.def("user_sample_seed", &PythonPool::SampleSeed, py::arg("seed"), py::arg("epoch"), py::arg("index"),
        "the seed user code's random, numpy and torch get before sample `index` of `epoch`");
  m.def("registered_ops", &Ops, "the names of every op a pipeline may use");
  m.def("normalize_nhwc", &NormalizeNHWC, py::arg("images"), py::arg("mean"), py::arg("std"),
        "uint8 NHWC -> float32 NCHW (x/255 - mean)/std, as a worker's float32 output");
}
