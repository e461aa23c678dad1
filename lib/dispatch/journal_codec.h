// The encoding of the journal's records (lib/dispatch/journal.h): one Update per
// record, as a Cap'n Proto message (schemas/journal.capnp, format 2). Format 1 (hand-kept
// tags and varints, before Ferry 0.2) is read for an upgrade in place, never written.
#ifndef FERRY_DISPATCH_JOURNAL_CODEC_H_
#define FERRY_DISPATCH_JOURNAL_CODEC_H_

#include <string>

#include "dispatch/state.h"
#include "ferry/status.h"

namespace ferry::dispatch {

// Format 2: a flat Cap'n Proto message (whole words).
std::string EncodeUpdate(const Update& u);
// DataLoss for anything malformed, or an update of a kind this build does not know.
Result<Update> DecodeUpdate(const std::string& bytes);
// Format 1's record payloads.
Result<Update> DecodeUpdateV1(const std::string& bytes);

}  // namespace ferry::dispatch

#endif  // FERRY_DISPATCH_JOURNAL_CODEC_H_
