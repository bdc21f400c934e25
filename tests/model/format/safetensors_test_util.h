// Builds safetensors files and tiny HF Llama checkpoints for tests.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "model/format/half.h"
#include "model/format/llama_tensor_plan.h"

namespace tandem::testing {

struct StEntry {
  std::string name;
  std::string dtype;  // F32, F16, BF16 (encoded from `values`) or anything (raw zero bytes)
  std::vector<int64_t> shape;
  std::vector<float> values;
};

inline std::string EncodeValues(const StEntry& e) {
  std::string out;
  for (const float v : e.values) {
    if (e.dtype == "F32") {
      out.append(reinterpret_cast<const char*>(&v), 4);
    } else {
      const uint16_t h = e.dtype == "F16" ? F32ToF16(v) : F32ToBf16(v);
      out.append(reinterpret_cast<const char*>(&h), 2);
    }
  }
  return out;
}

// The header JSON is assembled by hand here, independent of the reader's parser.
inline std::string SafetensorsImage(const std::vector<StEntry>& entries) {
  std::vector<std::string> parts = {R"("__metadata__":{"format":"pt"})"};
  std::string data;
  for (const StEntry& e : entries) {
    const std::string bytes = EncodeValues(e);
    parts.push_back(absl::StrCat("\"", e.name, "\":{\"dtype\":\"", e.dtype, "\",\"shape\":[",
                                 absl::StrJoin(e.shape, ","), "],\"data_offsets\":[", data.size(),
                                 ",", data.size() + bytes.size(), "]}"));
    data += bytes;
  }
  // StrCat, not `"{" + std::string(...)`: GCC 12 at -O3 reports a false -Wrestrict inside
  // std::string's operator+(const char*, string&&) (GCC bug 105329).
  const std::string header = absl::StrCat("{", absl::StrJoin(parts, ","), "}");
  const uint64_t n = header.size();
  return absl::StrCat(absl::string_view(reinterpret_cast<const char*>(&n), 8), header, data);
}

// A new, empty directory under the test temp dir, removed with its contents on destruction
// (unique per object, so reruns and parallel test processes never see each other's files).
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& prefix)
      : path_(::testing::TempDir() + "/" + prefix + "_XXXXXX") {
    EXPECT_NE(::mkdtemp(path_.data()), nullptr) << path_;
  }
  ~ScopedTempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A 2-layer Llama with vocab 16, hidden 8, 2 query heads, 1 KV head, head_dim 4,
// intermediate 12. Tensor i's values are i + 0.25·j (exact in F16/BF16 for small j), dtype
// cycling F32, F16, BF16.
struct TinyHf {
  std::string config_json;
  std::vector<StEntry> tensors;
};

// qwen3: model_type qwen3 with per-head self_attn.q_norm/k_norm weights ([head_dim]).
// phi3: model_type phi3 with fused self_attn.qkv_proj and mlp.gate_up_proj.
inline TinyHf MakeTinyHf(bool tied = false, bool bias = false, bool qwen3 = false,
                         bool phi3 = false) {
  TinyHf out;
  out.config_json = absl::StrCat(
      R"({"architectures":["LlamaForCausalLM"],"model_type":")",
      qwen3 ? "qwen3" : (phi3 ? "phi3" : "llama"), R"(","hidden_act":"silu",)",
      R"("vocab_size":16,"hidden_size":8,"intermediate_size":12,"num_hidden_layers":2,)",
      R"("num_attention_heads":2,"num_key_value_heads":1,"max_position_embeddings":256,)",
      R"("rope_theta":500000.0,"rms_norm_eps":1e-05,"rope_scaling":null,)",
      R"("tie_word_embeddings":)", tied ? "true" : "false", R"(,"attention_bias":)",
      bias ? "true" : "false", R"(,"bos_token_id":1,"eos_token_id":[2,0]})");
  LlamaConfig c;
  c.vocab_size = 16;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_layers = 2;
  c.num_q_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.tied_embeddings = tied;
  c.has_qkv_bias = bias;
  c.has_qk_norm = qwen3;
  c.fused_qkv_gate_up = phi3;
  LlamaWeights unused;
  const char* dtypes[] = {"F32", "F16", "BF16"};
  int i = 0;
  for (const LlamaTensorSlot& slot : PlanLlamaTensors(c, &unused)) {
    StEntry e{HfTensorName(slot.role, slot.layer), dtypes[i % 3], slot.shape, {}};
    int64_t n = 1;
    for (const int64_t d : slot.shape) n *= d;
    for (int64_t j = 0; j < n; ++j) e.values.push_back(static_cast<float>(i) + 0.25f * (j % 8));
    out.tensors.push_back(std::move(e));
    ++i;
  }
  return out;
}

}  // namespace tandem::testing
