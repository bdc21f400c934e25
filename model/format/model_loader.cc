#include "model/format/model_loader.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/format/content_hash.h"
#include "model/format/gguf_file.h"
#include "model/format/gguf_llama.h"
#include "model/format/hf_llama.h"
#include "model/format/json_value.h"
#include "model/format/llama_tensor_plan.h"
#include "model/format/mapped_file.h"
#include "model/tokenizer/chat.h"
#include "model/tokenizer/gguf_tokenizer.h"
#include "model/tokenizer/hf_tokenizer.h"

namespace tandem {
namespace {

constexpr int kIdentitySamples = 64;
constexpr size_t kIdentityWindow = 4096;

// Reports each stage's duration since the previous report.
class Progress {
 public:
  explicit Progress(const LoadOptions& options) : sink_(options.progress) {}

  void Stage(absl::string_view what) {
    const auto now = std::chrono::steady_clock::now();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_).count();
    last_ = now;
    const std::string line = absl::StrCat("load: ", what, " in ", ms, " ms");
    if (sink_) {
      sink_(line);
    } else {
      std::cerr << line << std::endl;
    }
  }

 private:
  std::function<void(absl::string_view)> sink_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

absl::StatusOr<LoadedModel> LoadGguf(const std::string& path, const LoadOptions& options,
                                     Progress& progress) {
  LoadedModel out;
  out.format = "gguf";
  TANDEM_ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  progress.Stage(absl::StrCat("parsed GGUF v", file->version(), " header of ", path, " (",
                              file->tensors().size(), " tensors, ", file->metadata().size(),
                              " keys)"));
  ContentHash hash;
  hash.Add("gguf");
  hash.AddU64(file->file_size());
  hash.Add(file->bytes().subspan(0, file->contents().data_offset));
  AddSampled(file->bytes().subspan(file->contents().data_offset), kIdentitySamples, kIdentityWindow,
             &hash);
  out.identity = absl::StrCat("gguf-", hash.Hex());
  if (file->Has("tokenizer.ggml.model")) {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, TokenizerFromGguf(*file));
    out.tokenizer = std::move(tokenizer);
    progress.Stage(absl::StrCat("built tokenizer (", out.tokenizer->vocab_size(), " tokens)"));
  }
  if (file->Has("tokenizer.chat_template")) {
    TANDEM_ASSIGN_OR_RETURN(const absl::string_view tmpl,
                            file->GetString("tokenizer.chat_template"));
    out.default_system_prompt = DefaultSystemPrompt(tmpl);
  }
  if (options.load_weights) {
    TANDEM_ASSIGN_OR_RETURN(out.weights, LoadGgufLlama(*file, options.keep_quantized));
    int64_t kept = 0, f32 = 0;
    for (const LlamaTensorSlot& slot : PlanLlamaTensors(out.weights.config, &out.weights)) {
      kept += static_cast<int64_t>(slot.dst->blocks.size());
      f32 += static_cast<int64_t>(slot.dst->data.size() * sizeof(float));
    }
    progress.Stage(absl::StrCat("loaded ", out.weights.config.num_layers, " layers (",
                                absl::SixDigits(kept / 1e6), " MB in block format, ",
                                absl::SixDigits(f32 / 1e6), " MB dequantised to f32)"));
  } else {
    TANDEM_ASSIGN_OR_RETURN(out.weights.config, ReadGgufLlamaConfig(*file));
  }
  return out;
}

absl::StatusOr<LoadedModel> LoadHf(const std::string& dir, const LoadOptions& options,
                                   Progress& progress) {
  LoadedModel out;
  out.format = "hf";
  TANDEM_ASSIGN_OR_RETURN(const std::unique_ptr<HfCheckpoint> ck, HfCheckpoint::Open(dir));
  progress.Stage(absl::StrCat("opened HF checkpoint ", dir, " (", ck->shards().size(),
                              " safetensors shard(s))"));
  ContentHash hash;
  hash.Add("hf");
  hash.Add(ck->config_json());
  for (const auto& shard : ck->shards()) {
    hash.AddU64(shard->file_size());
    hash.Add(shard->header_bytes());
    AddSampled(shard->bytes().subspan(shard->header_bytes().size()), kIdentitySamples,
               kIdentityWindow, &hash);
  }
  out.identity = absl::StrCat("hf-", hash.Hex());
  if (PathExists(dir + "/tokenizer.json")) {
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, TokenizerFromHfDirectory(dir));
    out.tokenizer = std::move(tokenizer);
    progress.Stage(absl::StrCat("built tokenizer (", out.tokenizer->vocab_size(), " tokens)"));
  }
  if (PathExists(dir + "/tokenizer_config.json")) {
    TANDEM_ASSIGN_OR_RETURN(const std::string text,
                            ReadFileToString(dir + "/tokenizer_config.json", 64 << 20));
    TANDEM_ASSIGN_OR_RETURN(const nlohmann::json config,
                            ParseJsonObject(text, "tokenizer_config.json"));
    if (const nlohmann::json* t = FindField(config, "chat_template");
        t != nullptr && t->is_string()) {
      out.default_system_prompt = DefaultSystemPrompt(t->get<std::string>());
    }
  }
  if (options.load_weights) {
    TANDEM_ASSIGN_OR_RETURN(out.weights, ck->LoadWeights());
    progress.Stage(absl::StrCat("converted ", out.weights.config.num_layers, " layers to f32"));
  } else {
    out.weights.config = ck->config();
  }
  return out;
}

}  // namespace

absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const LoadOptions& options) {
  Progress progress(options);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("model ", path));
  absl::StatusOr<LoadedModel> out =
      S_ISDIR(st.st_mode) ? LoadHf(path, options, progress) : LoadGguf(path, options, progress);
  if (out.ok() && out->tokenizer != nullptr &&
      out->tokenizer->vocab_size() > out->weights.config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tokenizer has ", out->tokenizer->vocab_size(), " tokens but the model only ",
        out->weights.config.vocab_size, " embedding rows"));
  }
  if (out.ok()) progress.Stage(absl::StrCat("model ", out->identity, " ready"));
  return out;
}

}  // namespace tandem
