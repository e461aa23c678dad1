# The dispatcher's journal records (lib/dispatch/journal.h), format 2: each record is
# one Update message. Field numbers are the format: add fields and union members at
# the end, never renumber. A file of format 2 starts with the 8 bytes "FERRYJ2\n";
# a record is a 12-byte header (u32 payload length, u32 CRC-32 of the payload, u32
# CRC-32 of the first 8 header bytes), then the payload: this message, unpacked.
@0xd7a3c2e9b8f14a65;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("ferry::schema::journal");

struct SplitRef {
  epoch @0 :UInt64;
  split @1 :Int64;
}

struct LeasedSplit {
  epoch @0 :UInt64;
  split @1 :Int64;
  consumer @2 :Text;
}

struct Update {
  union {
    createJob :group {
      name @0 :Text;
      job @1 :Data;            # the wire's Job (schemas/ferry.capnp), as EncodeJobBytes writes it
    }
    addConsumer :group {
      job @2 :Text;
      consumer @3 :Text;
    }
    registerWorker :group {
      worker @4 :Text;
      address @5 :Text;
      servesJob @6 :Text;      # hybrid: both set, or neither
      servesConsumer @7 :Text;
    }
    removeWorker @8 :Text;     # the worker
    drainWorker @9 :Text;      # the worker
    returnSplits :group {
      job @10 :Text;
      worker @11 :Text;
    }
    leaseSplits :group {
      job @12 :Text;
      worker @13 :Text;
      splits @14 :List(LeasedSplit);
    }
    ackSplits :group {
      job @15 :Text;
      consumer @16 :Text;
      splits @17 :List(SplitRef);
    }
    removeJob @18 :Text;       # the job
    jobProgress :group {
      job @19 :Text;
      firstOpen @20 :UInt64;
    }
    restoreConsumer :group {
      job @21 :Text;
      consumer @22 :Text;
      firstOpen @23 :UInt64;
      done @24 :List(SplitRef);
    }
    removeConsumer :group {
      job @25 :Text;
      consumer @26 :Text;
    }
    assignSplits :group {
      job @27 :Text;
      consumer @28 :Text;
      splits @29 :List(SplitRef);
    }
  }
}
