# Ferry's control plane, version 2: workers and clients talk to the dispatcher.
# Same framing as the data plane (schemas/ferry.capnp): a 16-byte FrameHeader, then
# one message; the same Challenge/Hello/HelloOk handshake opens each connection.
# Then strictly request -> reply, one at a time per connection:
#
#   worker -> RegisterWorker            <- RegisterWorkerOk
#   worker -> Heartbeat                 <- HeartbeatOk (the splits it holds, new ones first)
#   client -> GetOrCreateJob            <- JobInfo
#   client -> GetWorkers                <- WorkerList
#   client -> AckSplits                 <- JobStatus
#   client -> GetJobStatus              <- JobStatus
#   client -> RestoreConsumer           <- JobStatus   (resuming from a saved state)
#   client -> ReportWorker              <- WorkerList  (a worker's stream broke and it refuses connections)
#   tool   -> GetClusterStatus          <- ClusterStatus (ferry-ctl status)
#   any    <- Error (then the connection closes)
#
# A reply that depends on a state change is sent only after the change is in the
# dispatcher's journal.
@0xb4a2d5e1f08c3a71;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("ferry::schema");
using Ferry = import "ferry.capnp";

# Frame types (FrameHeader.type) 16..28, in the order of the structs below from
# RegisterWorker to ReportWorker; see MessageType in include/ferry/internal/frame.h.

# A dispatcher job: its name and what it is.
struct NamedJob {
  name @0 :Text;
  job @1 :Ferry.Job;
  digest @2 :UInt64;            # the dispatcher's digest of `job` (0: none); a worker names it
                                # back in haveJobs, and is then not sent the job again
}

struct HaveJob {
  name @0 :Text;
  digest @1 :UInt64;
}

struct SplitRef {
  epoch @0 :UInt64;
  split @1 :Int64;
}

struct Lease {
  job @0 :Text;
  epoch @1 :UInt64;
  split @2 :Int64;
  consumer @3 :Text;
}

struct RegisterWorker {
  workerId @0 :Text;
  address @1 :Text;             # where clients reach its data plane
  # A trainer's own cores joining its job (hybrid): this worker leases only splits of
  # job `servesJob` for consumer `servesConsumer`, and only that consumer is told of
  # it. Empty: a worker for every job and consumer.
  servesJob @2 :Text;
  servesConsumer @3 :Text;
}

struct RegisterWorkerOk {
  heartbeatIntervalMs @0 :UInt32;
}

struct Heartbeat {
  workerId @0 :Text;
  draining @1 :Bool;
  wantLeases @2 :Bool = true;
  leaving @3 :Bool;             # exiting now: its un-acked splits go back to pending
  wantJobs @4 :List(Text);      # jobs a client asked this worker for, whose configs it lacks
  unfitJobs @5 :List(UnfitJob); # jobs this worker cannot serve: it takes no leases of them (the
                                # reason only the first time after registering; then empty)
  load @6 :WorkerLoad;
  haveJobs @7 :List(HaveJob);   # jobs this worker has opened, with the digest they came with
}

struct UnfitJob {
  name @0 :Text;
  reason @1 :Text;              # e.g. the dataset is missing on this host, or lists otherwise
}

struct HeartbeatOk {
  # Every split leased to this worker and not yet acknowledged, the newly leased ones
  # first. The whole set, not a delta: a lost reply loses nothing, and a split missing
  # from it (acknowledged, or re-leased after this worker was presumed dead) is one
  # the worker may forget.
  leases @0 :List(Lease);
  jobs @1 :List(NamedJob);      # the jobs those leases (and wantJobs) belong to
  known @2 :Bool = true;        # false: re-register (e.g. declared dead)
  newLeases @3 :UInt32;         # how many of `leases` (from the front) are new
  idle @4 :Bool;                # there are jobs and every one has finished
  drain @5 :Bool;               # an operator drained this worker (ferry-ctl drain): drain and exit
  goneJobs @6 :List(Text);      # of the heartbeat's unfitJobs, those the dispatcher no longer has:
                                # the worker forgets them (its heartbeats carry only live work)
  sameJobs @7 :List(Text);      # jobs as `jobs`, that the worker named in haveJobs with the
                                # current digest: sent by name only
}

struct GetOrCreateJob {
  job @0 :NamedJob;             # numSamples/fingerprint are filled in by the dispatcher
  consumerId @1 :Text;
  fresh @2 :Bool;               # the consumer starts from nothing (no saved state)
}

struct JobInfo {
  job @0 :NamedJob;             # with the listing's numSamples and fingerprint
}

struct GetWorkers {
  # Who asks (empty: anyone): workers that serve only another consumer are left out.
  job @0 :Text;
  consumerId @1 :Text;
}

struct WorkerList {
  addresses @0 :List(Text);
}

struct AckSplits {
  job @0 :Text;
  consumerId @1 :Text;
  splits @2 :List(SplitRef);
  load @3 :ConsumerLoad;
}

struct GetJobStatus {
  job @0 :Text;
  consumerId @1 :Text;
  epoch @2 :UInt64;
  load @3 :ConsumerLoad;
}

# How a consumer takes its input, cumulative since it started (the dispatcher takes
# differences over a window): time blocked in Next() (input wait) and the wall time
# from its first Next() to its last, and the samples yielded.
struct ConsumerLoad {
  waitNs @0 :Int64;
  elapsedNs @1 :Int64;
  samples @2 :Int64;
}

# How a worker produces, cumulative since it started: samples into batches; time with
# at least one stream producing (not waiting for batch memory, i.e. for a consumer, or
# for splits); and the per-sample stage times, summed.
struct WorkerLoad {
  samples @0 :Int64;
  busyNs @1 :Int64;
  readNs @2 :Int64;
  decodeNs @3 :Int64;
  augmentNs @4 :Int64;
  # Each pipeline step's cost, sampled (a fraction of samples is timed step by step):
  # read, decode, each op by name, output. Cumulative, like the rest.
  ops @5 :List(OpCost);
  # Each job's decode-thread time here (its flow in the worker's fair scheduler),
  # cumulative: the jobs' shares.
  jobs @6 :List(JobBusy);
}

struct JobBusy {
  name @0 :Text;
  busyNs @1 :Int64;
}

struct OpCost {
  name @0 :Text;
  ns @1 :Int64;
  samples @2 :Int64;
}

struct JobStatus {
  firstOpen @0 :UInt64;         # epochs before this one are complete
  finished @1 :Bool;
  # The splits of `epoch` (the request's) assigned to this consumer so far, in order.
  mySplits @2 :List(Int64);
  epochFullyAssigned @3 :Bool;  # no split of `epoch` is left without a consumer
  # The same, packed (ferry::wire::PackSplitSet): a consumer's splits are runs (a
  # rank's are every W-th), so a few bytes hold what the list holds in 8 bytes each.
  # Senders fill this one when the splits are sorted and >= 0, else mySplits.
  mySplitsPacked @4 :Data;
}

# Splits of one epoch, packed as in JobStatus.mySplitsPacked.
struct EpochSplits {
  epoch @0 :UInt64;
  splits @1 :Data;
}

# A consumer resuming from a saved iterator state: the epochs before firstOpen and the
# `done` splits are complete for it; its other splits (even ones acknowledged after the
# state was saved) are to be delivered again.
struct RestoreConsumer {
  job @0 :Text;
  consumerId @1 :Text;
  firstOpen @2 :UInt64;
  done @3 :List(SplitRef);
  donePacked @4 :List(EpochSplits);  # more of `done`, packed (see JobStatus)
}

# A client lost its stream to the worker at `address` and cannot reconnect (connection
# refused): the dispatcher removes that worker at once, rather than at its heartbeat
# timeout, if it has also gone quiet. Its splits go back to pending.
struct ReportWorker {
  address @0 :Text;
}

# ferry-ctl status: the dispatcher's whole picture, for a tool (or a client).
struct GetClusterStatus {}

struct DrainWorker {
  worker @0 :Text;               # its id or its address; answered with a ClusterStatus
}

struct WorkerStatus {
  id @0 :Text;
  address @1 :Text;
  draining @2 :Bool;
  leases @3 :UInt32;             # splits it holds, not yet acknowledged
  silentMs @4 :Int64;            # since its last heartbeat
  servesJob @5 :Text;            # hybrid: only this consumer of this job
  servesConsumer @6 :Text;
  unfitJobs @7 :List(UnfitJob);  # jobs it says it cannot serve
  samplesPerSecond @8 :Float64;  # produced, over the last window
  capacity @9 :Float64;          # samples per busy second: what it could produce
}

struct JobSummary {
  name @0 :Text;
  dataset @1 :Text;
  numSamples @2 :Int64;
  consumers @3 :List(Text);
  firstOpen @4 :UInt64;          # the first epoch not yet complete
  epochs @5 :Int64;              # <= 0: unlimited
  splitsPerEpoch @6 :Int64;
  pending @7 :Int64;             # splits of the open epochs, by status
  leased @8 :Int64;
  done @9 :Int64;
  finished @10 :Bool;
  ranks @11 :Int64;              # a ranked job's world size, else 0
  # The advice (see the dispatcher's Advice): over the last window, the consumers'
  # input wait (fraction of their time), the rate they would take without waiting, the
  # workers that would remove the wait, and what limits the job.
  inputWait @12 :Float64;
  demand @13 :Float64;           # samples/s
  recommendedWorkers @14 :Int64; # 0: not known yet
  limitedBy @15 :Text;
  threadShare @16 :Float64 = -1;  # of its workers' decode-thread time, last window; -1: not known
  weight @17 :Float64 = 1;
  priority @18 :Int32;
}

struct ClusterStatus {
  stateId @0 :Text;
  journalWritable @1 :Bool;
  workers @2 :List(WorkerStatus);
  jobs @3 :List(JobSummary);
}
