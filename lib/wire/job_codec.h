// JobSpec <-> the wire's Job struct: the one mapping, used by the data plane's
// OpenStream, the control plane and the journal's bytes. Internal to lib/wire.
#ifndef FERRY_WIRE_JOB_CODEC_H_
#define FERRY_WIRE_JOB_CODEC_H_

#include "ferry.capnp.h"
#include "ferry/job.h"
#include "ferry/status.h"

namespace ferry::wire::codec {

// `pipeline_json`: job.pipeline.ToJson() if the caller has it (else made here).
void PutJob(schema::Job::Builder b, const JobSpec& job, const std::string* pipeline_json = nullptr);
// Checks the enums and parses the pipeline (InvalidArgument otherwise).
Result<JobSpec> GetJob(schema::Job::Reader r);

}  // namespace ferry::wire::codec

#endif  // FERRY_WIRE_JOB_CODEC_H_
