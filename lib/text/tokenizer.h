// Tokenizer: a caption -> int32 ids on the worker, by a SentencePiece model, for
// fixed-shape multimodal training (a job's "tokens" target: int32 [B, L] plus each
// row's length).
//
// The ids are those of the Python `sentencepiece` package for the same model and
// text: `sp.encode(text, add_bos=..., add_eos=...)`, then cut to L (the bos kept, a
// cut eos lost, as `ids[:L]` would) and padded to L with the pad id.
//
// Built with SentencePiece (Debian's libsentencepiece-dev) when CMake finds it; a
// build without it refuses a job that asks for tokens, by name, and every other job
// runs as before. Thread-safe once loaded: Encode is const (SentencePiece's encoder
// does not mutate its model), so the decode threads share one Tokenizer.
#ifndef FERRY_TEXT_TOKENIZER_H_
#define FERRY_TEXT_TOKENIZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mutex.h"
#include "ferry/job.h"
#include "ferry/status.h"

namespace ferry {

class DataRoots;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Loads `spec.model` (checked against `roots`; at most 64 MiB). InvalidArgument for
  // a file that is not a SentencePiece model, or a model that lacks the bos or eos the
  // spec asks for; Unimplemented in a build without SentencePiece.
  static Result<std::shared_ptr<const Tokenizer>> Load(const TokenizerSpec& spec, const DataRoots& roots);
  static bool Available();  // this build has SentencePiece

  // `text`'s ids, cut to the spec's length (at most `length` entries; not padded).
  // InvalidArgument when the text does not encode (SentencePiece refuses it).
  virtual Status Encode(std::string_view text, std::vector<int32_t>* ids) const = 0;
  // What a row is padded with: the spec's pad_id, or the model's, or 0.
  virtual int32_t pad_id() const = 0;
  virtual int32_t vocab_size() const = 0;
};

// The tokenizers a worker has loaded, by spec: one per model while a stream uses it.
class TokenizerCache {
 public:
  Result<std::shared_ptr<const Tokenizer>> Open(const TokenizerSpec& spec, const DataRoots& roots) LOCKS_EXCLUDED(mu_);

 private:
  Mutex mu_;
  std::map<std::string, std::weak_ptr<const Tokenizer>> open_ GUARDED_BY(mu_);
};

}  // namespace ferry

#endif  // FERRY_TEXT_TOKENIZER_H_
