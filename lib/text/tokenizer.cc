#include "text/tokenizer.h"

#include <utility>

#include "data/data_roots.h"
#include "data/file_util.h"

#ifdef FERRY_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#endif

namespace ferry {
namespace {

constexpr uint64_t kMaxModelBytes = uint64_t{64} << 20;

#ifdef FERRY_HAVE_SENTENCEPIECE
class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(TokenizerSpec spec, std::unique_ptr<sentencepiece::SentencePieceProcessor> sp)
      : spec_(std::move(spec)), sp_(std::move(sp)) {
    pad_ = spec_.pad_id >= 0 ? spec_.pad_id : (sp_->pad_id() >= 0 ? sp_->pad_id() : 0);
  }

  Status Encode(std::string_view text, std::vector<int32_t>* ids) const override {
    ids->clear();
    std::vector<int> pieces;
    const auto s = sp_->Encode(absl::string_view(text.data(), text.size()), &pieces);
    if (!s.ok()) return Status::InvalidArgument("the caption does not tokenize: " + s.ToString());
    const size_t max = size_t(spec_.length);
    ids->reserve(std::min(max, pieces.size() + 2));
    if (spec_.add_bos) ids->push_back(sp_->bos_id());
    for (size_t i = 0; i < pieces.size() && ids->size() < max; ++i) ids->push_back(pieces[i]);
    if (spec_.add_eos && ids->size() < max) ids->push_back(sp_->eos_id());
    return Status::OK();
  }
  int32_t pad_id() const override { return pad_; }
  int32_t vocab_size() const override { return sp_->GetPieceSize(); }

 private:
  const TokenizerSpec spec_;
  const std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  int32_t pad_ = 0;
};
#endif

std::string CacheKey(const TokenizerSpec& s) {
  return s.model + '\n' + std::to_string(s.length) + (s.add_bos ? "b" : "") + (s.add_eos ? "e" : "") + '\n' +
         std::to_string(s.pad_id);
}

}  // namespace

bool Tokenizer::Available() {
#ifdef FERRY_HAVE_SENTENCEPIECE
  return true;
#else
  return false;
#endif
}

Result<std::shared_ptr<const Tokenizer>> Tokenizer::Load(const TokenizerSpec& spec, const DataRoots& roots) {
  if (spec.length < 1 || spec.length > TokenizerSpec::kMaxLength)
    return Status::InvalidArgument("tokenizer length out of range");
#ifndef FERRY_HAVE_SENTENCEPIECE
  (void)roots;
  return Status::Unimplemented(
      "this build of Ferry has no SentencePiece (libsentencepiece-dev was not found when it was built): "
      "it cannot tokenize captions (the \"tokens\" target)");
#else
  FERRY_RETURN_IF_ERROR(roots.Check(spec.model, "tokenizer model"));
  // Read once, whole and bounded, then parsed from memory: the bytes checked are the
  // bytes used.
  std::string bytes;
  if (Status s = internal::ReadWholeFile(spec.model, &bytes, kMaxModelBytes); !s.ok())
    return s.WithContext("tokenizer model");
  auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = sp->LoadFromSerializedProto(absl::string_view(bytes.data(), bytes.size()));
  if (!st.ok()) return Status::InvalidArgument("tokenizer model " + spec.model + ": not a SentencePiece model");
  if (spec.add_bos && sp->bos_id() < 0)
    return Status::InvalidArgument("tokenizer model " + spec.model + " has no bos piece (add_bos)");
  if (spec.add_eos && sp->eos_id() < 0)
    return Status::InvalidArgument("tokenizer model " + spec.model + " has no eos piece (add_eos)");
  return std::shared_ptr<const Tokenizer>(new SentencePieceTokenizer(spec, std::move(sp)));
#endif
}

Result<std::shared_ptr<const Tokenizer>> TokenizerCache::Open(const TokenizerSpec& spec, const DataRoots& roots) {
  const std::string key = CacheKey(spec);
  {
    MutexLock lock(&mu_);
    auto it = open_.find(key);
    if (it != open_.end()) {
      if (auto t = it->second.lock()) {
        // The path is checked again: a cached model is not a way around the roots.
        FERRY_RETURN_IF_ERROR(roots.Check(spec.model, "tokenizer model"));
        return t;
      }
    }
  }
  FERRY_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> t, Tokenizer::Load(spec, roots));
  MutexLock lock(&mu_);
  for (auto e = open_.begin(); e != open_.end();) e = e->second.expired() ? open_.erase(e) : std::next(e);
  open_[key] = t;
  return t;
}

}  // namespace ferry
