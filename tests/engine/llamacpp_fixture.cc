#include "tests/engine/llamacpp_fixture.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/format/gguf_file.h"
#include "model/format/gguf_llama.h"

namespace tandem::testing {
namespace {

std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

LlamaCppFixture ReadLlamaCppFixture(const std::string& name) {
  const std::string path =
      absl::StrCat(TANDEM_SOURCE_DIR, "/tests/engine/testdata/llamacpp/", name, ".txt");
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  LlamaCppFixture f;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    const std::string key = line.substr(0, colon);
    const std::vector<std::string> v =
        colon == std::string::npos ? std::vector<std::string>() : Words(line.substr(colon + 1));
    if (v.empty()) {
      ADD_FAILURE() << path << ": line without values: '" << line << "'";
    } else if (key == "arch") {
      f.options.arch = v[0];
    } else if (key == "seed") {
      f.options.seed = std::stoull(v[0]);
    } else if (key == "rope_scaling") {
      f.options.rope_scaling = v[0] == "llama3"   ? SyntheticRopeScaling::kLlama3
                               : v[0] == "linear" ? SyntheticRopeScaling::kLinear
                               : v[0] == "yarn"   ? SyntheticRopeScaling::kYarn
                                                  : SyntheticRopeScaling::kNone;
    } else if (key == "rope_factor") {
      f.options.rope_scaling_factor = std::stof(v[0]);
    } else if (key == "rope_original_context") {
      f.options.rope_original_context = std::stoi(v[0]);
    } else if (key == "prompt" || key == "greedy") {
      for (const std::string& t : v) {
        (key == "prompt" ? f.prompt : f.greedy).push_back(std::stoi(t));
      }
    } else if (absl::StartsWith(key, "logits ")) {
      std::vector<double>& row = f.logits[std::stoi(key.substr(7))];
      for (const std::string& x : v) row.push_back(std::stod(x));
    } else {
      ADD_FAILURE() << path << ": unknown line '" << key << "'";
    }
  }
  return f;
}

LlamaWeights LoadFixtureModel(const LlamaCppFixture& fixture) {
  absl::StatusOr<GgufWriter> gguf = BuildSyntheticModel(fixture.options);
  EXPECT_TRUE(gguf.ok()) << gguf.status();
  if (!gguf.ok()) return {};
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::FromBytes(gguf->Serialize(), fixture.options.arch + ".gguf");
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok()) return {};
  absl::StatusOr<LlamaWeights> w = LoadGgufLlama(**file);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? std::move(w).value() : LlamaWeights{};
}

}  // namespace tandem::testing
