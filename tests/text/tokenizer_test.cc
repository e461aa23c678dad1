// The caption tokenizer (lib/text/tokenizer.h): a model trained here with
// SentencePiece's own trainer, loaded through the data roots, shared by threads.
// (tests/python/test_tokens.py checks the ids against the Python package's.)
#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "data/data_roots.h"
#include "testutil.h"

#ifdef FERRY_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#endif

namespace ferry {
namespace {

using testing::TempDir;
using testing::WriteFile;

#ifdef FERRY_HAVE_SENTENCEPIECE

const std::vector<std::string> kCaptions = {
    "a dog on the sofa", "two birds under a blue sky", "a red car near the river", "the cat is running",
    "café au lait on a table", "über die straße", "a naïve drawing of a house", "snow on the mountains"};

// Trains a small BPE model on the captions into `dir`; its path.
std::string TrainModel(const TempDir& dir, bool bos = true) {
  std::string corpus;
  for (int k = 0; k < 20; ++k)
    for (const std::string& c : kCaptions) corpus += c + "\n";
  WriteFile(dir / "corpus.txt", corpus);
  const std::string prefix = dir / (bos ? "spm" : "nobos");
  const auto s = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + dir / "corpus.txt" + " --model_prefix=" + prefix +
      " --vocab_size=70 --model_type=bpe --minloglevel=2 --unk_id=0 --pad_id=3 --eos_id=2 --bos_id=" +
      (bos ? "1" : "-1"));
  EXPECT_TRUE(s.ok()) << s.ToString();
  return prefix + ".model";
}

TEST(TokenizerTest, IdsAreTheModelsCutAndWithBosAndEos) {
  TempDir tmp;
  const std::string model = TrainModel(tmp);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(model).ok());
  for (int32_t length : {1, 4, 64}) {
    TokenizerSpec spec{model, length, true, true, -1};
    Result<std::shared_ptr<const Tokenizer>> t = Tokenizer::Load(spec, DataRoots());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ((*t)->pad_id(), 3) << "the model's";
    EXPECT_EQ((*t)->vocab_size(), 70);
    for (const std::string& c : kCaptions) {
      std::vector<int> want;
      ASSERT_TRUE(sp.Encode(c, &want).ok());
      want.insert(want.begin(), 1);
      want.push_back(2);
      if (want.size() > size_t(length)) want.resize(size_t(length));
      std::vector<int32_t> got;
      ASSERT_TRUE((*t)->Encode(c, &got).ok());
      EXPECT_EQ(got, std::vector<int32_t>(want.begin(), want.end())) << c << " at length " << length;
    }
  }
  Result<std::shared_ptr<const Tokenizer>> t = Tokenizer::Load({model, 8, false, false, 9}, DataRoots());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->pad_id(), 9) << "the job's pad id wins";
  std::vector<int32_t> ids;
  ASSERT_TRUE((*t)->Encode("", &ids).ok());
  EXPECT_TRUE(ids.empty());
}

TEST(TokenizerTest, ModelsAreConfinedCheckedAndNeverQuoted) {
  TempDir root, outside;
  const std::string model = TrainModel(outside);
  Result<DataRoots> roots = DataRoots::Make({root.path()});
  ASSERT_TRUE(roots.ok());
  Result<std::shared_ptr<const Tokenizer>> t = Tokenizer::Load({model, 8}, *roots);
  EXPECT_EQ(t.status().code(), StatusCode::kPermissionDenied) << t.status().ToString();
  t = Tokenizer::Load({root / "missing.model", 8}, *roots);
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound) << t.status().ToString();
  WriteFile(root / "secret.model", "TOPSECRET-CONTENTS not a model");
  t = Tokenizer::Load({root / "secret.model", 8}, *roots);
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("not a SentencePiece model"), std::string::npos);
  EXPECT_EQ(t.status().message().find("TOPSECRET"), std::string::npos);
  // A model whose bos is disabled cannot add one.
  const std::string nobos = TrainModel(root, /*bos=*/false);
  EXPECT_TRUE(Tokenizer::Load({nobos, 8, false, true}, *roots).ok());
  t = Tokenizer::Load({nobos, 8, true, false}, *roots);
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("bos"), std::string::npos);

  // The cache gives one tokenizer per spec, and checks the roots each time.
  TokenizerCache cache;
  Result<std::shared_ptr<const Tokenizer>> a = cache.Open({nobos, 8}, *roots);
  Result<std::shared_ptr<const Tokenizer>> b = cache.Open({nobos, 8}, *roots);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  Result<std::shared_ptr<const Tokenizer>> c = cache.Open({nobos, 9}, *roots);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->get(), c->get());
  Result<DataRoots> other = DataRoots::Make({outside.path()});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(cache.Open({nobos, 8}, *other).status().code(), StatusCode::kPermissionDenied)
      << "a cached model is not a way around the roots";
}

TEST(TokenizerTest, ThreadsShareOneTokenizer) {
  TempDir tmp;
  const std::string model = TrainModel(tmp);
  Result<std::shared_ptr<const Tokenizer>> t = Tokenizer::Load({model, 16, true, true}, DataRoots());
  ASSERT_TRUE(t.ok());
  std::vector<std::vector<int32_t>> want(kCaptions.size());
  for (size_t i = 0; i < kCaptions.size(); ++i) ASSERT_TRUE((*t)->Encode(kCaptions[i], &want[i]).ok());
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      std::vector<int32_t> ids;
      for (int round = 0; round < 200; ++round) {
        const size_t i = size_t(round + k) % kCaptions.size();
        if (!(*t)->Encode(kCaptions[i], &ids).ok() || ids != want[i]) ++mismatches[size_t(k)];
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

#else

TEST(TokenizerTest, ABuildWithoutSentencePieceRefusesByName) {
  EXPECT_FALSE(Tokenizer::Available());
  Result<std::shared_ptr<const Tokenizer>> t = Tokenizer::Load({"/m.model", 8}, DataRoots());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("SentencePiece"), std::string::npos);
}

#endif

}  // namespace
}  // namespace ferry
