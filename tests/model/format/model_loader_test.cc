#include "model/format/model_loader.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "model/format/gguf_file.h"
#include "model/format/json_value.h"
#include "model/tools/synthetic_model.h"
#include "tests/model/format/safetensors_test_util.h"
#include "tests/model/format/status_matchers.h"

namespace tandem {
namespace {

using ::tandem::testing::MakeTinyHf;
using ::tandem::testing::SafetensorsImage;
using ::tandem::testing::WriteFile;

const std::string& Dir() {
  // One directory for the whole binary, removed at exit.
  static const ::tandem::testing::ScopedTempDir dir("loader");
  return dir.path();
}

std::string Synthetic(const std::string& name, uint64_t seed) {
  const std::string path = Dir() + "/" + name;
  SyntheticModelOptions o;
  o.seed = seed;
  EXPECT_TRUE(WriteSyntheticModel(o, path).ok());
  return path;
}

LoadOptions Quiet(std::vector<std::string>* lines) {
  LoadOptions o;
  o.progress = [lines](absl::string_view line) { lines->emplace_back(line); };
  return o;
}

TEST(ModelLoaderTest, GgufWeightsTokenizerAndProgress) {
  std::vector<std::string> lines;
  absl::StatusOr<LoadedModel> m = LoadModel(Synthetic("loader_a.gguf", 1), Quiet(&lines));
  ASSERT_OK(m);
  EXPECT_EQ(m->format, "gguf");
  EXPECT_EQ(m->weights.config.num_layers, 2);
  EXPECT_EQ(m->weights.layers.size(), 2u);
  ASSERT_NE(m->tokenizer, nullptr);
  EXPECT_EQ(m->tokenizer->vocab_size(), 320);
  EXPECT_TRUE(absl::StartsWith(m->identity, "gguf-"));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_TRUE(absl::StartsWith(lines[0], "load: parsed GGUF v3 header of")) << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], "built tokenizer (320 tokens) in")) << lines[1];
  EXPECT_TRUE(absl::StrContains(lines[2], "loaded 2 layers (0 MB in block format, ")) << lines[2];
  EXPECT_TRUE(absl::EndsWith(lines[3], " ms")) << lines[3];
}

TEST(ModelLoaderTest, IdentityFollowsContentNotPath) {
  std::vector<std::string> lines;
  const LoadOptions o = Quiet(&lines);
  absl::StatusOr<LoadedModel> a = LoadModel(Synthetic("id_a.gguf", 1), o);
  absl::StatusOr<LoadedModel> a_copy = LoadModel(Synthetic("id_a_copy.gguf", 1), o);
  absl::StatusOr<LoadedModel> b = LoadModel(Synthetic("id_b.gguf", 2), o);
  ASSERT_OK(a);
  ASSERT_OK(a_copy);
  ASSERT_OK(b);
  EXPECT_EQ(a->identity, a_copy->identity);
  EXPECT_NE(a->identity, b->identity);
  // Same header, one weight byte changed (the first data byte is always sampled).
  absl::StatusOr<std::string> bytes = ReadFileToString(Dir() + "/id_a.gguf", 1 << 30);
  ASSERT_OK(bytes);
  absl::StatusOr<std::unique_ptr<GgufFile>> parsed = GgufFile::FromBytes(*bytes, "a");
  ASSERT_OK(parsed);
  (*bytes)[(*parsed)->contents().data_offset] ^= 1;
  const std::string changed = Dir() + "/id_a_changed.gguf";
  WriteFile(changed, *bytes);
  absl::StatusOr<LoadedModel> c = LoadModel(changed, o);
  ASSERT_OK(c);
  EXPECT_NE(a->identity, c->identity);
}

TEST(ModelLoaderTest, MetadataOnlyLoadSkipsWeights) {
  std::vector<std::string> lines;
  LoadOptions o = Quiet(&lines);
  o.load_weights = false;
  absl::StatusOr<LoadedModel> m = LoadModel(Synthetic("meta.gguf", 1), o);
  ASSERT_OK(m);
  EXPECT_EQ(m->weights.config.hidden_size, 128);
  EXPECT_TRUE(m->weights.layers.empty());
  EXPECT_TRUE(m->weights.token_embedding.empty());
  ASSERT_NE(m->tokenizer, nullptr);
}

TEST(ModelLoaderTest, HfDirectoryWithTokenizer) {
  const ::tandem::testing::ScopedTempDir tmp("loader_hf");
  const std::string& dir = tmp.path();
  const auto hf = MakeTinyHf(/*tied=*/true);
  WriteFile(dir + "/config.json", hf.config_json);
  WriteFile(dir + "/model.safetensors", SafetensorsImage(hf.tensors));
  std::vector<std::string> lines;
  absl::StatusOr<LoadedModel> m = LoadModel(dir, Quiet(&lines));
  ASSERT_OK(m);
  EXPECT_EQ(m->format, "hf");
  EXPECT_EQ(m->tokenizer, nullptr);  // no tokenizer.json: token ids only
  EXPECT_TRUE(absl::StartsWith(m->identity, "hf-"));
  EXPECT_EQ(m->weights.config.rope_style, RopeStyle::kRotateHalf);
}

TEST(ModelLoaderTest, Errors) {
  std::vector<std::string> lines;
  EXPECT_STATUS_IS(LoadModel(Dir() + "/absent.gguf", Quiet(&lines)), absl::StatusCode::kNotFound,
                   "absent.gguf");
  const std::string junk = Dir() + "/junk.bin";
  WriteFile(junk, "definitely not a model");
  EXPECT_STATUS_IS(LoadModel(junk, Quiet(&lines)), absl::StatusCode::kInvalidArgument,
                   "not a GGUF file: bad magic");
}

}  // namespace
}  // namespace tandem
