#include "tests/e2e/reference.h"

#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "engine/combined_engine.h"
#include "gtest/gtest.h"
#include "model/format/model_loader.h"
#include "model/tools/synthetic_model.h"

namespace tandem::testing {

std::vector<std::vector<int32_t>> ReferenceGreedy(const std::string& model_path,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  int32_t max_tokens, const std::string& backend) {
  absl::StatusOr<LoadedModel> model = LoadModel(model_path);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  InstanceOptions o;
  o.kv_bytes_per_rank = int64_t{32} << 20;
  o.backend = backend;
  absl::StatusOr<std::unique_ptr<Instance>> inst = Instance::Create(model->weights, o);
  EXPECT_TRUE(inst.ok()) << inst.status();
  if (!inst.ok()) return {};
  CombinedEngine engine(inst->get(), PrefillOptions{}, DecodeOptions{});
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : prompts) {
    GenerateRequest req;
    req.prompt = p;
    req.max_new_tokens = max_tokens;
    absl::StatusOr<GenerateResult> r = engine.GenerateBlocking(req, absl::Minutes(2));
    EXPECT_TRUE(r.ok()) << r.status();
    out.push_back(r.ok() ? r->tokens : std::vector<int32_t>{});
  }
  return out;
}

ReferenceRun ReferenceSampled(const std::string& model_path, const std::vector<int32_t>& prompt,
                              const SamplingParams& sampling, int32_t max_tokens) {
  absl::StatusOr<LoadedModel> model = LoadModel(model_path);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  InstanceOptions o;
  o.kv_bytes_per_rank = int64_t{32} << 20;
  absl::StatusOr<std::unique_ptr<Instance>> inst = Instance::Create(model->weights, o);
  EXPECT_TRUE(inst.ok()) << inst.status();
  if (!inst.ok()) return {};
  CombinedEngine engine(inst->get(), PrefillOptions{}, DecodeOptions{});
  GenerateRequest req;
  req.prompt = prompt;
  req.sampling = sampling;
  req.max_new_tokens = max_tokens;
  req.return_logits = true;
  absl::StatusOr<GenerateResult> r = engine.GenerateBlocking(req, absl::Minutes(2));
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  return ReferenceRun{r->tokens, r->logits};
}

std::string WriteTempSyntheticModel(const SyntheticModelOptions& options,
                                    const std::string& file_name) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/tandem-model-XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp " << dir << " failed";
    return "";
  }
  const std::string path = dir + "/" + file_name;
  const absl::Status s = WriteSyntheticModel(options, path);
  EXPECT_TRUE(s.ok()) << s;
  return s.ok() ? path : "";
}

std::string SyntheticModelPath(uint64_t seed) {
  static std::map<uint64_t, std::string>* paths = new std::map<uint64_t, std::string>();
  auto it = paths->find(seed);
  if (it != paths->end()) return it->second;
  // 24 query heads over 2 KV heads: tp 1, 2, 4, 6, 8 are valid, and decode DCP 2, 3 and 4 exist
  // (tp=4/6/8 replicate each KV head 2/3/4 times).
  SyntheticModelOptions o;
  o.seed = seed;
  o.hidden = 192;
  o.q_heads = 24;
  o.kv_heads = 2;
  o.head_dim = 8;
  o.intermediate = 384;
  const std::string path = WriteTempSyntheticModel(o, "synthetic.gguf");
  (*paths)[seed] = path;
  return path;
}

}  // namespace tandem::testing
