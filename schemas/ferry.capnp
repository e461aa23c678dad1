# Ferry's wire protocol, version 2.
#
# Every message travels as one frame:
#   FrameHeader (16 bytes, little-endian): magic "FRY1", version (u16), type (u16),
#   length (u64, bytes that follow), then one Cap'n Proto message in the standard
#   stream framing (segment table, then segments). `type` names the root struct below
#   (see MessageType). Receivers check magic, version, type and length against their
#   limits before allocating anything.
#
# Data plane (client <-> worker), one TCP connection per stream:
#   1. worker -> client   Challenge   (nonce; whether a token is required)
#   2. client -> worker   Hello       (role, HMAC-SHA256(token, nonce) when required)
#   3. worker -> client   HelloOk, or Error(unauthenticated) and close
#   4. client -> worker   OpenStream  (the job, inline or by name; initial credits;
#                                      its share of the epoch; resume state)
#   5. worker -> client   Batch ...   (one per credit; credits return with Credit)
#      client -> worker   Credit      (n more batches may be sent)
#   6. worker -> client   EndOfEpoch  (after an epoch's last batch of this stream)
#   Errors: worker -> client Error(code, message); the connection then closes.
#
# Control plane (dispatcher): schemas/control.capnp, types 16 and up. Unknown types
# are refused like any malformed frame.
#
# Version 2: one Job struct (below) describes a job everywhere: inline in OpenStream,
# in the control plane, and in the dispatcher's journal.
@0xffde25dee0499500;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("ferry::schema");

const protocolVersion :UInt16 = 2;

enum MessageType {
  invalid @0;
  challenge @1;
  hello @2;
  helloOk @3;
  openStream @4;
  credit @5;
  batch @6;
  endOfEpoch @7;
  error @8;
  # 16.. the control plane (schemas/control.capnp).
}

enum Role {
  client @0;
  worker @1;
  dispatcher @2;
  tool @3;
}

struct Challenge {
  version @0 :UInt16;
  nonce @1 :Data;            # 32 random bytes
  authRequired @2 :Bool;
  serverId @3 :Text;
}

struct Hello {
  version @0 :UInt16;
  role @1 :Role;
  mac @2 :Data;              # the client's proof (lib/net/auth.h), when required
  peerId @3 :Text;
  nonce @4 :Data;            # 32 random bytes of the client's: the server proves itself over both
}

struct HelloOk {
  serverId @0 :Text;
  # A dispatcher's state identity (its work dir's): a client that sees it change
  # knows the dispatcher lost its state. Empty from workers.
  stateId @1 :Text;
  # The server's proof that it holds the token too (lib/net/auth.h), when the client
  # sent a proof: a client with a token refuses a server that cannot give it.
  mac @2 :Data;
}

enum LastBatch {
  drop @0;
  pad @1;
  keep @2;
}

enum BadSamples {
  skip @0;                   # compact the batch around a bad sample
  refill @1;                 # the split's next good sample takes its row
}

enum ProcessingMode {
  distributedEpoch @0;       # each sample once per epoch across all workers
  parallelEpochs @1;         # every worker yields every epoch by itself
}

enum Ordering {
  arrival @0;
  deterministic @1;
}

enum Sharing {
  splits @0;
  every @1;
}

# A job: everything needed to produce the same samples, in the same order, with the
# same pixels, batched the same way (ferry::JobSpec, include/ferry/job.h).
struct Job {
  dataset @0 :Text;          # as seen on the worker's filesystem
  pipelineJson @1 :Text;     # PipelineSpec JSON
  seed @2 :UInt64;
  shuffle @3 :Bool = true;
  epochs @4 :Int64 = 1;      # <= 0: forever
  batchSize @5 :Int32;
  lastBatch @6 :LastBatch = keep;
  mode @7 :ProcessingMode;
  ordering @8 :Ordering;
  batchesPerSplit @9 :Int32 = 4;
  numSamples @10 :Int64;     # of the listing; 0 = not known yet
  fingerprint @11 :UInt64;   # of (listing, pipeline); 0 = not known (not checked)
  numConsumers @12 :Int32;   # 0: consumers join freely; W > 0: W ranks with equal steps
  firstEpoch @13 :UInt64;    # a dispatcher job's first epoch
  takenBegin @14 :List(Int64);  # a remainder job: positions [takenBegin[i], takenEnd[i])
  takenEnd @15 :List(Int64);    # of the epoch's order already yielded
  badSamples @16 :BadSamples;   # ferry::BadSamples
  targets @17 :List(Text);      # JobSpec::targets: the batch fields to carry
  tokenizer @18 :Tokenizer;     # JobSpec::tokenizer (the "tokens" target); absent: none
  userCode @19 :UserCode;       # JobSpec::user_code (a "python:" dataset); absent: none
  sharing @20 :Sharing;         # JobSpec::sharing
  weight @21 :Float64 = 1.0;    # JobSpec::weight: a share of the workers' threads
  priority @22 :Int32;          # JobSpec::priority
  mixture @23 :List(MixtureSource);  # JobSpec::mixture: a weighted mixture's sources (dataset "mixture")
  mixtureEpoch @24 :Int64;      # JobSpec::mixture_epoch: draws an epoch
}

# One source of a weighted mixture (ferry::MixtureSource).
struct MixtureSource {
  dataset @0 :Text;
  weight @1 :Float64 = 1.0;
  pipeline @2 :Text;            # "": the job's; else a PipelineSpec name or JSON
  numSamples @3 :Int64;         # of the source's listing; 0 = not known yet
}

struct ResumeState {
  epoch @0 :UInt64;
  batchesDone @1 :Int64;     # batches of this stream already yielded in `epoch`
}

struct OpenStream {
  job :union {
    inline @0 :Job;          # point to point
    name @1 :Text;           # a dispatcher job
  }
  consumerId @2 :Text;
  credits @3 :UInt32;        # batches the worker may send before the next Credit
  resume @4 :ResumeState;
  # Point to point: this stream serves every numShards-th sample of each epoch's
  # order from shardIndex on, from epoch firstEpoch.
  shardIndex @5 :UInt32;
  numShards @6 :UInt32 = 1;
  firstEpoch @7 :UInt64;
  # Point to point, a ranked job (job.numConsumers > 0): the stream serves this rank's
  # batches (its shardIndex-th of numShards share of them).
  rank @8 :UInt32;
  # By name: the client's JobSpec::ConfigFingerprint() (0: not checked). A worker
  # holding facts of an older job of that name (collected, the name reused) fetches
  # the job again rather than serve the old one.
  jobConfig @9 :UInt64;
}

struct Credit {
  n @0 :UInt32;
}

enum DType {
  uint8 @0;
  int64 @1;
  float32 @2;
  int32 @3;
}

struct Tensor {
  dtype @0 :DType;
  shape @1 :List(Int64);
  data @2 :Data;             # dense, row-major, little-endian
}

struct SkippedSample {
  index @0 :Int64;
  path @1 :Text;
  reason @2 :Text;
}

struct Batch {
  job @0 :Text;
  epoch @1 :UInt64;
  split @2 :Int64;
  batchInSplit @3 :Int64;
  batchesInSplit @4 :Int64;
  batchInEpoch @5 :Int64;
  lastInEpoch @6 :Bool;
  valid @7 :Int64;           # leading rows that are real samples; the rest is padding
  images @8 :Tensor;         # [B,H,W,C] uint8 or [B,C,H,W] float32
  labels @9 :Tensor;         # [B] int64
  indices @10 :Tensor;       # [B] int64 sample indices, -1 for padding
  skipped @11 :List(SkippedSample);
  batchesInEpoch @12 :Int64; # batches of this epoch (of its rank, in a ranked job)
  # Point to point: what this worker lists (JobFingerprint of its listing and the
  # pipeline, and its sample count), so that a client reading from several workers
  # finds out at once if they see different files. 0: not sent (dispatcher jobs, whose
  # listing the dispatcher checks).
  listing @13 :UInt64;
  listedSamples @14 :Int64;
  # [B, num_classes] float32 soft targets of a batch op (MixUp/CutMix); absent otherwise.
  targets @15 :Tensor;
  # The job's per-sample fields (JobSpec::targets), in its order: see Field.
  fields @16 :List(Field);
  # User code (a "python:" job): the batch its collate made, as one block of bytes
  # (every array of it, 64-byte aligned) and the JSON that says how to rebuild the
  # nested batch from it (ferry/_user_worker.py).
  structure @17 :Text;
  userData @18 :Data;
}

# A named per-sample field. Ragged (offsets present): row r's values are
# values[offsets[r] .. offsets[r + 1]) along dimension 0, offsets int64 [B + 1] from 0,
# non-decreasing, ending at values' first dimension. Dense (no offsets): values has
# one entry per row along dimension 0.
struct UserCode {             # ferry::UserCodeSpec
  payload @0 :Data;           # cloudpickle bytes of (dataset, transform, collate_fn)
  versions @1 :Text;          # the trainer's Python and package versions, JSON
  input @2 :Text;             # "": a whole Dataset; "pil", "uint8", "float": after the pipeline
}

struct Tokenizer {            # ferry::TokenizerSpec
  model @0 :Text;             # a SentencePiece .model file on the worker
  length @1 :Int32;           # ids cut or padded to it
  addBos @2 :Bool;
  addEos @3 :Bool;
  padId @4 :Int32;            # -1: the model's pad id, or 0
}

struct Field {
  name @0 :Text;
  values @1 :Tensor;
  offsets @2 :Tensor;
}

struct EndOfEpoch {
  epoch @0 :UInt64;
  batches @1 :Int64;
  samples @2 :Int64;
  last @3 :Bool;             # no more epochs follow on this stream
}

struct Error {
  code @0 :UInt8;            # ferry::StatusCode
  message @1 :Text;
}
