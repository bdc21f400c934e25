// LoadModel: one entry point for every checkpoint Tandem serves. A regular file starting with
// "GGUF" is a GGUF model (weights + tokenizer.ggml.*); a directory is a HF checkpoint
// (config.json + safetensors + optional tokenizer.json).
//
// `identity` names the model's content for the KV compatibility hash: a hex digest over the
// header bytes (GGUF metadata + tensor infos; config.json + safetensors headers), the file
// sizes and 64 evenly spaced 4 KiB samples of the tensor data. It does not depend on the path
// and costs a few MB of reading, not a pass over the weights; two files with identical headers
// but different weights (e.g. synthetic models from different seeds) still differ.
//
// Progress: one line per stage with its duration goes to `options.progress` (stderr when
// unset), e.g. "load: parsed GGUF header (272 tensors, 33 keys) in 4 ms".
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/format/llama_weights.h"
#include "model/tokenizer/tokenizer.h"

namespace tandem {

struct LoadOptions {
  std::function<void(absl::string_view line)> progress;  // null: print to stderr
  bool load_weights = true;  // false: config, tokenizer and identity only (router, client)
  // GGUF matrices of the types the CPU kernels read stay in their block format (Tensor::blocks;
  // see LoadGgufLlama); false dequantises every tensor to f32.
  bool keep_quantized = true;
};

struct LoadedModel {
  LlamaWeights weights;                        // only config filled when !load_weights
  std::shared_ptr<const Tokenizer> tokenizer;  // null when the checkpoint has none
  std::string identity;
  std::string format;  // "gguf" or "hf"
  // The chat template's default system message (chat.h DefaultSystemPrompt); empty if none.
  std::string default_system_prompt;
};

[[nodiscard]] absl::StatusOr<LoadedModel> LoadModel(const std::string& path,
                                                    const LoadOptions& options = {});

}  // namespace tandem
