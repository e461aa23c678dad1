#include "worker/stream.h"

#include <utility>

#include "core/histogram.h"
#include "core/log.h"
#include "ops/pipeline.h"
#include "pipeline/targets_batch.h"
#include "wire/codec.h"

namespace ferry {

WorkerStream::~WorkerStream() { Closed(); }

void WorkerStream::Open(wire::OpenStreamMsg m, int64_t now_ns) {
  if (state_ != State::kNew) return;
  state_ = State::kOpening;
  Result<std::shared_ptr<const PreparedJob>> admitted = core_->Admit(m);
  if (!admitted.ok()) return Refuse(admitted.status());
  prepared_ = std::move(*admitted);
  msg_ = std::move(m);
  // The client may grant credits as soon as it has sent OpenStream (its consumer
  // takes batches prefetched before a reconnect), so they count while the stream opens.
  outbox_.Grant(msg_.credits);
  if (msg_.by_name) {
    JobSource* jobs = core_->jobs();
    feed_ = jobs->Feed(msg_.job_name, msg_.consumer_id);
    jobs->Want(msg_.job_name);
    if (feed_->held() == 0) jobs->Poke();  // a consumer is waiting: ask for splits now
    job_deadline_ns_ = now_ns + core_->options().job_wait_ns;
    return WaitForJob(now_ns);
  }
  if (msg_.job.synthetic()) return StartSynthetic();
  // Listing can take a second on ImageNet-sized trees: off the io thread.
  std::weak_ptr<WorkerStream> weak = weak_from_this();
  WorkerCore* core = core_;
  core_->env().run_blocking([weak, core, prepared = prepared_] {
    // User code: its "listing" is loading it in a Python process (an import error
    // refuses the stream at once, naming the module).
    auto ds = std::make_shared<Result<std::shared_ptr<const Dataset>>>(prepared->OpenData(core->openers()));
    // A model to load too (off the io thread as well), once the dataset opened.
    auto tok = std::make_shared<Result<std::shared_ptr<const Tokenizer>>>(std::shared_ptr<const Tokenizer>());
    if (ds->ok()) *tok = core->datasets().OpenTokenizer(prepared->spec());
    core->env().post([weak, ds, tok] {
      if (auto self = weak.lock()) self->StartInline(std::move(*ds), std::move(*tok));
    });
  });
}

void WorkerStream::Credit(uint32_t n) {
  outbox_.Grant(n);
  Pump();
}

void WorkerStream::OnTimer(int64_t now_ns) {
  if (state_ == State::kOpening && msg_.by_name) WaitForJob(now_ns);
}

void WorkerStream::StartInline(Result<std::shared_ptr<const Dataset>> ds,
                               Result<std::shared_ptr<const Tokenizer>> tokenizer) {
  if (state_ != State::kOpening) return;
  if (!ds.ok()) return Refuse(ds.status());
  if (!tokenizer.ok()) return Refuse(tokenizer.status());
  Result<StreamSource> source = InlineStream(msg_, prepared_, std::move(*ds));
  if (!source.ok()) return Refuse(source.status());
  source->tokenizer = std::move(*tokenizer);
  StartProducer(std::move(*source));
}

// A stream by job name (dispatcher mode) serves the splits leased to this worker for
// its consumer. The job's facts come with its first lease (or the heartbeat after a
// Want); until then it looks every job_poll_ns, until its deadline.
void WorkerStream::WaitForJob(int64_t now_ns) {
  if (state_ != State::kOpening) return;
  JobSource* jobs = core_->jobs();
  std::shared_ptr<const WorkerJob> job = jobs->Job(msg_.job_name);
  if (job != nullptr && msg_.job_config != 0 && job->spec.ConfigFingerprint() != msg_.job_config) {
    jobs->Refresh(msg_.job_name);  // an older job of that name: fetch this one
    job = nullptr;
  }
  if (job == nullptr) {
    if (now_ns >= job_deadline_ns_)
      return Refuse(Status::Unavailable("job " + msg_.job_name + ": the dispatcher has not named it to this worker within " +
                                        std::to_string(core_->options().job_wait_ns / 1000'000'000) + " s"));
    return host_->WakeAt(std::min(now_ns + core_->options().job_poll_ns, job_deadline_ns_));
  }
  // This worker cannot serve the job (it told the dispatcher, which sends its
  // consumers elsewhere): a transient refusal, so the client tries the other workers
  // rather than fail.
  if (!job->status.ok())
    return Refuse(Status::Unavailable("this worker cannot serve job " + msg_.job_name + ": " + job->status.message()));
  StreamSource source = NamedStream(*job, feed_, jobs->worker_id());
  if (source.splits) {
    named_ = true;
    ++core_->counters().named_streams;
  }
  StartProducer(std::move(source));
}

void WorkerStream::StartProducer(StreamSource source) {
  // Compiled and checked once: when the stream was admitted (inline), or when the
  // worker learnt of the dispatcher's job (DispatcherLink::OpenJob).
  if (source.prepared == nullptr) return Refuse(Status::Internal("the stream's job was not prepared"));
  const PreparedJob& prepared = *source.prepared;
  user_code_ = prepared.runs_python();
  if (user_code_ && core_->env().python == nullptr) return Refuse(UserCodeRefused());
  pipeline_ = prepared.pipeline();
  if (Status st = prepared.CheckData(*source.dataset); !st.ok()) return Refuse(st);
  targets_ = source.job.targets;
  token_length_ = source.job.tokenizer.length;
  token_pad_ = source.tokenizer != nullptr ? source.tokenizer->pad_id() : 0;
  if (!source.job.tokenizer.model.empty() && source.tokenizer == nullptr)
    return Refuse(Status::Internal("the job's tokenizer was not loaded"));
  if (!source.splits) {  // point to point: each batch says what this worker lists
    listing_ = source.job.fingerprint;
    listed_samples_ = source.job.num_samples;
  }
  const int buffers = core_->buffers();
  // User code: the pixels are the Python processes' memory; these buffers hold the
  // rows' indices (and bound the batches in flight).
  auto allocator = std::make_shared<PooledBatchAllocator>(source.job.batch_size, prepared.sample_bytes(), buffers,
                                                          prepared.num_classes());
  if (Status st = Reserve(uint64_t(buffers) * allocator->buffer_bytes()); !st.ok()) return Refuse(st);
  outbox_.SetSource(source.splits, source.last_epoch);
  std::weak_ptr<WorkerStream> weak = weak_from_this();
  // The producer's callbacks run on its threads and may outlive the stream: they hold
  // only the post function (the service's, which outlives every producer) and a weak
  // reference.
  auto post = core_->env().post;
  // User code: a batch in flight per Python process (each waits on its process).
  const int in_flight = user_code_ ? std::max(2, core_->env().python->options().processes) : 2;
  producer_ = std::make_unique<BatchProducer>(
      std::move(source.dataset), prepared.source(), prepared.sample_pipeline(), source.job.seed, std::move(source.plan),
      std::move(allocator), core_->arena(), in_flight,
      [weak, post](ProducedBatch&& b) {
        auto shared = std::make_shared<ProducedBatch>(std::move(b));
        post([weak, shared] {
          if (auto self = weak.lock()) self->OnBatch(std::move(*shared));
        });
      },
      [weak, post](const Status& s) {
        post([weak, s] {
          if (auto self = weak.lock()) self->OnProducerDone(s);
        });
      });
  producer_->SetSyntheticBatchCost(core_->options().synthetic_cost_us);
  producer_->SetTargets(targets_);
  producer_->SetTokenizer(std::move(source.tokenizer));
  producer_->SetSourcePipelines(prepared.source_pipelines());
  producer_->SetStats(core_->pipeline_stats());
  if (user_code_) producer_->SetUserCode(core_->env().python, source.job);
  // The job's share of the threads: streams of one job (by name) are one flow.
  if (core_->env().scheduler != nullptr)
    producer_->SetFlow(core_->env().scheduler->Join(source.splits || msg_.by_name ? msg_.job_name
                                                                                   : "inline/" + msg_.consumer_id,
                                                    source.job.weight, source.job.priority));
  // A sweep's lane: what the other lanes made here is served from the window.
  if (source.splits && source.job.sharing == Sharing::kEvery && core_->env().window != nullptr)
    producer_->SetWindow(core_->env().window, source.job.ContentKey());
  state_ = State::kStreaming;
  ++core_->counters().streams;
  producer_->Start();
  if (draining_) producer_->StopPlanning();
}

void WorkerStream::OnBatch(ProducedBatch&& b) {
  if (state_ != State::kStreaming) return;
  wire::BatchFrameInput in;
  in.provenance = b.plan.provenance();
  in.rows = b.rows;
  in.valid = b.valid;
  const Shape shape = pipeline_->output_shape();
  in.image_dtype = pipeline_->dtype();
  if (user_code_) {
    in.image_dtype = DType::kUint8;
    in.image_dims = {0, 0, 0};  // no pixels: the batch is the user's, in user_data
    in.structure = std::move(b.user.structure);
    in.user_data = b.user.data;
    in.user_bytes = b.user.bytes;
  } else if (in.image_dtype == DType::kUint8) {
    in.image_dims = {shape.height, shape.width, shape.channels};
  } else {
    in.image_dims = {shape.channels, shape.height, shape.width};
  }
  in.targets = b.memory.targets;
  in.num_classes = b.memory.targets != nullptr && !user_code_ ? pipeline_->num_classes() : 0;
  in.images = b.memory.images;
  in.labels = b.memory.labels;
  in.indices = b.memory.indices;
  in.skipped = std::move(b.skipped);
  in.owner = std::move(b.memory.owner);
  if (b.user.owner != nullptr)
    in.owner = std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(std::move(in.owner),
                                                                                        std::move(b.user.owner));
  if (!targets_.empty()) {
    PackedFields f = PackFields(targets_, b.targets, b.rows, shape.height, shape.width, token_length_, token_pad_);
    in.fields = std::move(f.fields);
    in.owner = std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(std::move(in.owner),
                                                                                        std::move(f.owner));
  }
  if (named_) in.job = msg_.job_name;
  in.listing = listing_;
  in.listed_samples = listed_samples_;
  outbox_.AddBatch(wire::EncodeBatch(in), in.provenance, b.valid);
  Pump();
}

void WorkerStream::OnProducerDone(const Status& s) {
  producer_done_ = true;
  producer_status_ = s;
  Pump();
}

// Sends what the outbox releases; once the source is done and all is sent, the
// stream's last frame (stream_outbox.h decides which), then a graceful close.
void WorkerStream::Pump() {
  if (state_ != State::kStreaming && state_ != State::kOpening) return;
  if (synthetic_) SyntheticFill();
  StreamOutbox::Sendable now = outbox_.TakeSendable();
  WorkerCounters& c = core_->counters();
  c.batches_sent += now.batches;
  c.bytes_sent += now.bytes;
  for (int64_t ns : now.waited_ns) c.send_wait.ObserveNs(ns);
  for (wire::OutFrame& f : now.frames) host_->Send(std::move(f));
  if (producer_done_ && outbox_.queued() == 0 && state_ == State::kStreaming) {
    state_ = State::kEnding;
    if (!producer_status_.ok())
      LogWarn("stream for %s failed: %s", host_->peer().c_str(), producer_status_.ToString().c_str());
    if (std::optional<wire::OutFrame> last = outbox_.Final(producer_status_, draining_)) host_->Send(std::move(*last));
    host_->CloseAfterWrites();
  }
}

void WorkerStream::Drain() {
  draining_ = true;
  if (state_ == State::kStreaming) {
    if (producer_) producer_->StopPlanning();
    if (synthetic_) {
      synthetic_->Stop();
      producer_done_ = true;
      Pump();
    }
  } else if (state_ == State::kNew || state_ == State::kOpening) {
    Refuse(Status::Unavailable("worker is draining"));
  }
}

// Synthetic source (ferry-bench transport): ready-made batches, no producer.
void WorkerStream::StartSynthetic() {
  auto source = SyntheticSource::Create(msg_);
  if (!source.ok()) return Refuse(source.status());
  if (Status st = Reserve((*source)->batch_bytes()); !st.ok()) return Refuse(st);
  synthetic_ = std::move(*source);
  outbox_.SetSource(/*splits=*/false, /*last_epoch=*/-1);  // its EndOfEpochs are its own
  state_ = State::kStreaming;
  ++core_->counters().streams;
  Pump();
}

void WorkerStream::SyntheticFill() {
  // A client that granted 2^32 credits and never read grew this queue until the OOM
  // killer came: the core bounds it by the stream's buffers.
  const int64_t target = core_->SyntheticQueueTarget(outbox_.credits());
  while (!synthetic_->done() && int64_t(outbox_.queued()) < target) {
    std::optional<SyntheticSource::Frame> f = synthetic_->Next();
    if (!f) break;
    outbox_.AddFrame(std::move(f->frame), f->needs_credit, f->last);
  }
  if (synthetic_->done()) producer_done_ = true;
}

void WorkerStream::Refuse(const Status& s) {
  if (state_ == State::kClosed || state_ == State::kEnding) return;
  state_ = State::kEnding;
  host_->CancelWake();
  host_->Send(wire::EncodeError(s));
  host_->CloseAfterWrites();
  if (producer_) core_->env().retire(std::move(producer_));
}

Status WorkerStream::Reserve(uint64_t bytes) {
  FERRY_RETURN_IF_ERROR(core_->Reserve(bytes));
  reserved_ += bytes;
  return Status::OK();
}

void WorkerStream::Closed() {
  if (state_ == State::kClosed) return;
  if (named_) --core_->counters().named_streams;
  named_ = false;
  core_->Release(std::exchange(reserved_, 0));
  state_ = State::kClosed;
  outbox_ = StreamOutbox();  // frees the queued frames' memory now
  if (producer_) core_->env().retire(std::move(producer_));  // frees the stream's memory off the io thread
}

}  // namespace ferry
