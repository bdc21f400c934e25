// tandem-make-model: writes a small random Llama-family model as GGUF (see synthetic_model.h).
//
//   tandem-make-model --out model.gguf [--arch llama|qwen2|qwen3|phi3] [--seed 1] [--layers 2]
//       [--hidden 128] [--q-heads 8] [--kv-heads 2] [--head-dim 16] [--intermediate 256]
//       [--vocab 320] [--context 2048] [--dtype f32|f16|q8_0] [--tied] [--qkv-bias]
//       [--rope-scaling none|linear|llama3|yarn] [--rope-factor 4]
//       [--rope-original-context N] [--rope-theta 10000]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "model/tools/synthetic_model.h"

namespace {

int Usage(const std::string& error) {
  std::fprintf(stderr,
               "tandem-make-model: %s\nusage: tandem-make-model --out PATH "
               "[--arch llama|qwen2|qwen3|phi3] [--seed N] [--layers N] [--hidden N] [--q-heads N] "
               "[--kv-heads N] [--head-dim N] [--intermediate N] [--vocab N] [--context N] "
               "[--dtype f32|f16|q8_0] [--tied] [--qkv-bias] "
               "[--rope-scaling none|linear|llama3|yarn] [--rope-factor F] "
               "[--rope-original-context N] [--rope-theta F]\n",
               error.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  tandem::SyntheticModelOptions o;
  std::string out;
  const std::pair<const char*, int*> ints[] = {
      {"--layers", &o.layers},
      {"--hidden", &o.hidden},
      {"--q-heads", &o.q_heads},
      {"--kv-heads", &o.kv_heads},
      {"--head-dim", &o.head_dim},
      {"--intermediate", &o.intermediate},
      {"--vocab", &o.vocab},
      {"--context", &o.context},
      {"--rope-original-context", &o.rope_original_context}};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--tied") {
      o.tied_embeddings = true;
      continue;
    }
    if (flag == "--qkv-bias") {
      o.qkv_bias = true;
      continue;
    }
    if (i + 1 >= argc) return Usage(flag + " needs a value");
    const std::string value = argv[++i];
    bool known = false;
    for (const auto& [name, dst] : ints) {
      if (flag != name) continue;
      known = true;
      if (!absl::SimpleAtoi(value, dst)) return Usage(flag + " needs an integer");
    }
    if (known) continue;
    if (flag == "--out") {
      out = value;
    } else if (flag == "--arch") {
      o.arch = value;
    } else if (flag == "--rope-scaling") {
      if (value == "none") {
        o.rope_scaling = tandem::SyntheticRopeScaling::kNone;
      } else if (value == "linear") {
        o.rope_scaling = tandem::SyntheticRopeScaling::kLinear;
      } else if (value == "llama3") {
        o.rope_scaling = tandem::SyntheticRopeScaling::kLlama3;
      } else if (value == "yarn") {
        o.rope_scaling = tandem::SyntheticRopeScaling::kYarn;
      } else {
        return Usage("--rope-scaling must be none, linear, llama3 or yarn");
      }
    } else if (flag == "--rope-factor") {
      if (!absl::SimpleAtof(value, &o.rope_scaling_factor)) {
        return Usage("--rope-factor needs a number");
      }
    } else if (flag == "--rope-theta") {
      if (!absl::SimpleAtof(value, &o.rope_theta)) return Usage("--rope-theta needs a number");
    } else if (flag == "--seed") {
      if (!absl::SimpleAtoi(value, &o.seed)) return Usage("--seed needs an integer");
    } else if (flag == "--dtype") {
      if (value == "f32") {
        o.dtype = tandem::GgmlType::kF32;
      } else if (value == "f16") {
        o.dtype = tandem::GgmlType::kF16;
      } else if (value == "q8_0") {
        o.dtype = tandem::GgmlType::kQ8_0;
      } else {
        return Usage("--dtype must be f32, f16 or q8_0");
      }
    } else {
      return Usage("unknown flag " + flag);
    }
  }
  if (out.empty()) return Usage("--out is required");
  const absl::Status s = tandem::WriteSyntheticModel(o, out);
  if (!s.ok()) {
    std::fprintf(stderr, "tandem-make-model: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("%s\n", out.c_str());
  return 0;
}
