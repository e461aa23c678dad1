// ferry._ferry: the C++ side of the Python binding. The Python package (ferry/
// __init__.py) builds ferry.Loader and ferry.DataLoader on it.
//
// An Iterator wraps either the in-process Loader or the remote Client. next() waits
// with the GIL released, in slices of 50 ms between which it checks for signals, so
// Ctrl-C raises KeyboardInterrupt promptly. Each batch comes back as numpy arrays
// that view the batch buffer (no copy); each array's base is a capsule holding the
// batch's keepalive, so the buffer lives as long as any array (or a torch tensor made
// from one with torch.from_numpy) does.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "ferry/client.h"
#include "ferry/loader.h"

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

py::array View(const TensorView& t, const std::shared_ptr<void>& keepalive) {
  // The capsule owns a copy of the keepalive: the buffer outlives the array.
  auto* hold = new std::shared_ptr<void>(keepalive);
  py::capsule base(hold, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.begin() + t.rank);
  py::dtype dtype = t.dtype == DType::kUint8     ? py::dtype::of<uint8_t>()
                    : t.dtype == DType::kFloat32 ? py::dtype::of<float>()
                                                 : py::dtype::of<int64_t>();
  // Read-write: torch.from_numpy refuses read-only arrays. The buffer is this batch's
  // alone; a trainer that writes into it harms nobody.
  return py::array(dtype, shape, {}, const_cast<void*>(t.data), base);
}

class PyIterator {
 public:
  explicit PyIterator(std::unique_ptr<BatchIterator> it) : it_(std::move(it)) {}

  // A dict with the batch, or None at the end.
  py::object Next() {
    for (;;) {
      bool ready;
      {
        py::gil_scoped_release release;
        ready = it_->WaitReady(0.05);
      }
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (ready) break;
    }
    Result<Batch> b = [&] {
      py::gil_scoped_release release;
      return it_->Next();
    }();
    if (!b.ok()) {
      if (b.status().IsOutOfRange()) return py::none();
      Raise(b.status());
    }
    py::dict d;
    d["images"] = View(b->images, b->keepalive);
    d["labels"] = View(b->labels, b->keepalive);
    d["indices"] = View(b->indices, b->keepalive);
    d["valid"] = b->valid;
    d["epoch"] = b->provenance.epoch;
    d["batch_in_epoch"] = b->provenance.batch_in_epoch;
    d["last_in_epoch"] = b->provenance.last_in_epoch;
    d["split"] = b->provenance.split;
    d["batch_in_split"] = b->provenance.batch_in_split;
    d["buffer"] = py::make_tuple(reinterpret_cast<uintptr_t>(b->buffer), b->buffer_size);
    return d;
  }

  std::vector<py::tuple> TakeSkipped() {
    std::vector<py::tuple> out;
    for (const SkippedSample& s : it_->TakeSkipped()) out.push_back(py::make_tuple(s.index, s.path, s.reason));
    return out;
  }

  py::dict Stats() const {
    const IteratorStats s = it_->stats();
    py::dict d;
    d["batches"] = s.batches;
    d["samples"] = s.samples;
    d["skipped"] = s.skipped;
    d["wait_seconds"] = s.wait_seconds;
    return d;
  }

  std::string State() const {
    auto* c = dynamic_cast<Client*>(it_.get());
    if (c == nullptr) throw py::type_error("only a dispatcher client has a serialized state");
    return c->SaveState().Serialize();
  }

  int64_t BatchesPerEpoch() const {
    if (auto* l = dynamic_cast<Loader*>(it_.get())) return l->batches_per_epoch();
    return -1;
  }

  // Dispatcher mode: the job's sample count (waits up to `seconds` for the dispatcher).
  int64_t JobSamples(double seconds) const {
    auto* c = dynamic_cast<Client*>(it_.get());
    if (c == nullptr) return -1;
    std::optional<JobSpec> info;
    {
      py::gil_scoped_release release;
      info = c->JobInfo(seconds);
    }
    return info ? info->num_samples : -1;
  }

  void Close() {
    py::gil_scoped_release release;
    it_.reset();
  }

 private:
  std::unique_ptr<BatchIterator> it_;
};

LastBatch ToLastBatch(const std::string& s) { return Check(ParseLastBatch(s)); }

PipelineSpec ToSpec(const std::string& pipeline) { return Check(PipelineSpec::Parse(pipeline)); }

std::unique_ptr<PyIterator> OpenLocal(const std::string& data, const std::string& pipeline, int batch_size,
                                      uint64_t seed, bool shuffle, const std::string& last_batch, int64_t epochs,
                                      uint64_t first_epoch, int64_t resume_batches, int threads, int prefetch) {
  LoaderOptions o;
  o.job.dataset = data;
  o.job.pipeline = ToSpec(pipeline);
  o.job.batch_size = batch_size;
  o.job.seed = seed;
  o.job.shuffle = shuffle;
  o.job.last_batch = ToLastBatch(last_batch);
  o.job.epochs = epochs;
  o.first_epoch = first_epoch;
  o.resume_batches = resume_batches;
  o.threads = threads;
  o.prefetch = prefetch;
  std::unique_ptr<Loader> l;
  {
    py::gil_scoped_release release;  // listing a large tree takes a while
    l = Check(Loader::Open(o));
  }
  return std::make_unique<PyIterator>(std::move(l));
}

std::unique_ptr<PyIterator> Connect(const std::vector<std::string>& workers, const std::string& dispatcher,
                                    const std::string& job_name, const std::string& data, const std::string& pipeline,
                                    int batch_size, uint64_t seed, bool shuffle, const std::string& last_batch,
                                    int64_t epochs, uint64_t first_epoch, int credits, const std::string& token_file,
                                    const std::string& consumer_id, bool deterministic, const std::string& resume_state,
                                    int batches_per_split) {
  ClientOptions o;
  o.workers = workers;
  o.dispatcher = dispatcher;
  o.job_name = job_name;
  o.job.dataset = data;
  o.job.pipeline = ToSpec(pipeline);
  o.job.batch_size = batch_size;
  o.job.seed = seed;
  o.job.shuffle = shuffle;
  o.job.last_batch = ToLastBatch(last_batch);
  o.job.epochs = epochs;
  o.job.ordering = deterministic ? Ordering::kDeterministic : Ordering::kArrival;
  o.job.batches_per_split = batches_per_split;
  o.first_epoch = first_epoch;
  o.credits = credits;
  o.token_file = token_file;
  o.consumer_id = consumer_id;
  o.resume_state = resume_state;
  return std::make_unique<PyIterator>(Check(Client::Connect(o)));
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

}  // namespace
}  // namespace ferry

PYBIND11_MODULE(_ferry, m) {
  using namespace ferry;
  m.doc() = "Ferry's C++ core (see the ferry package for the Python API)";
  py::class_<PyIterator>(m, "Iterator")
      .def("next", &PyIterator::Next, "the next batch as a dict of numpy views, or None at the end")
      .def("take_skipped", &PyIterator::TakeSkipped)
      .def("stats", &PyIterator::Stats)
      .def("state", &PyIterator::State)
      .def("batches_per_epoch", &PyIterator::BatchesPerEpoch)
      .def("job_samples", &PyIterator::JobSamples, py::arg("seconds") = 30.0)
      .def("close", &PyIterator::Close);
  m.def("open_local", &OpenLocal, py::arg("data"), py::arg("pipeline"), py::arg("batch_size"), py::arg("seed"),
        py::arg("shuffle"), py::arg("last_batch"), py::arg("epochs"), py::arg("first_epoch"),
        py::arg("resume_batches"), py::arg("threads"), py::arg("prefetch"));
  m.def("connect", &Connect, py::arg("workers"), py::arg("dispatcher"), py::arg("job_name"), py::arg("data"),
        py::arg("pipeline"), py::arg("batch_size"), py::arg("seed"), py::arg("shuffle"), py::arg("last_batch"),
        py::arg("epochs"), py::arg("first_epoch"), py::arg("credits"), py::arg("token_file"), py::arg("consumer_id"),
        py::arg("deterministic"), py::arg("resume_state"), py::arg("batches_per_split"));
  m.def("list_dataset", &ListDataset, py::arg("data"));
}
