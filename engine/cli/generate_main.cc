// tandem-generate: one process, one instance (prefill then decode, no transfer) — the
// single-instance baseline. Loads a model, formats the prompt, streams the generated text to
// stdout, and prints load progress and throughput to stderr.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/flag_dashes.h"
#include "engine/combined_engine.h"
#include "model/chat_template/chat_setup.h"
#include "model/format/model_loader.h"
#include "model/tokenizer/chat.h"
#include "model/tokenizer/streaming_decoder.h"

ABSL_FLAG(std::string, model, "", "GGUF model file or HF checkpoint directory");
ABSL_FLAG(std::string, prompt, "", "prompt text");
ABSL_FLAG(std::string, prompt_ids, "", "prompt as comma-separated token ids");
ABSL_FLAG(bool, chat, false,
          "render --prompt as a user turn with the model's chat template (ChatML when it has "
          "none)");
ABSL_FLAG(std::string, system, "", "system message for --chat");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template file for --chat, replacing the model's own");
ABSL_FLAG(int32_t, max_tokens, 64, "tokens to generate");
ABSL_FLAG(float, temperature, 0.f, "sampling temperature (0 = greedy)");
ABSL_FLAG(int32_t, top_k, 0, "top-k (0 = off)");
ABSL_FLAG(float, top_p, 1.f, "nucleus sampling mass in (0, 1]; 1 = off, 0 is an error");
ABSL_FLAG(uint64_t, seed, 0, "sampling seed");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past stop tokens");
ABSL_FLAG(int32_t, tp, 1, "tensor parallel degree");
ABSL_FLAG(int32_t, pcp, 1, "prefill context parallel degree");
ABSL_FLAG(int32_t, dcp, 1, "decode context parallel degree");
ABSL_FLAG(int32_t, block_size, 16, "KV block size");
ABSL_FLAG(int32_t, interleave, 1, "DCP interleave");
ABSL_FLAG(int64_t, kv_budget_mb, 256, "KV pool size per rank, MiB");
ABSL_FLAG(int32_t, max_prefill_tokens, 2048, "tokens per prefill step");
ABSL_FLAG(std::string, backend, "cpu", "compute backend: cpu or cuda");

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "tandem-generate: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  tandem::NormalizeFlagDashes(argc, argv);
  absl::SetProgramUsageMessage(
      "tandem-generate --model PATH (--prompt TEXT | --prompt-ids 1,2,3) [--chat] "
      "[--max-tokens N] [--temperature T] [--tp N --pcp N --dcp N --block-size B --interleave I]");
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_model).empty()) return Fail("--model is required");
  if (absl::GetFlag(FLAGS_prompt).empty() == absl::GetFlag(FLAGS_prompt_ids).empty()) {
    return Fail("give exactly one of --prompt or --prompt-ids");
  }
  const absl::Time t_load = absl::Now();
  absl::StatusOr<tandem::LoadedModel> model = tandem::LoadModel(absl::GetFlag(FLAGS_model));
  if (!model.ok()) return Fail(model.status().ToString());
  const tandem::Tokenizer* tok = model->tokenizer.get();

  std::vector<int32_t> prompt;
  if (!absl::GetFlag(FLAGS_prompt_ids).empty()) {
    for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_prompt_ids), ',')) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id)) return Fail("bad token id '" + std::string(part) + "'");
      prompt.push_back(id);
    }
  } else {
    if (tok == nullptr) return Fail("the model has no tokenizer; use --prompt-ids");
    std::string text = absl::GetFlag(FLAGS_prompt);
    bool with_bos = true;
    if (absl::GetFlag(FLAGS_chat)) {
      absl::StatusOr<std::shared_ptr<const tandem::ChatFormatter>> chat = tandem::LoadChatFormatter(
          absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_chat_template), tok);
      if (!chat.ok()) return Fail(chat.status().ToString());
      std::fprintf(stderr, "%s\n", (*chat)->Describe().c_str());
      std::vector<tandem::ChatMessage> messages;
      if (!absl::GetFlag(FLAGS_system).empty())
        messages.push_back({"system", absl::GetFlag(FLAGS_system)});
      messages.push_back({"user", text});
      absl::StatusOr<std::string> formatted =
          (*chat)->Format(messages, /*add_generation_prompt=*/true);
      if (!formatted.ok()) return Fail(formatted.status().ToString());
      text = *std::move(formatted);
      with_bos = (*chat)->add_bos();
    } else if (!absl::GetFlag(FLAGS_chat_template).empty()) {
      return Fail("--chat_template applies to --chat");
    }
    prompt = tok->Encode(text, /*parse_special=*/true, with_bos);
  }

  tandem::InstanceOptions io;
  io.parallel = tandem::ParallelConfig{absl::GetFlag(FLAGS_tp), absl::GetFlag(FLAGS_pcp),
                                       absl::GetFlag(FLAGS_dcp), absl::GetFlag(FLAGS_block_size),
                                       absl::GetFlag(FLAGS_interleave)};
  io.kv_bytes_per_rank = absl::GetFlag(FLAGS_kv_budget_mb) << 20;
  io.backend = absl::GetFlag(FLAGS_backend);
  std::fprintf(stderr, "load: building instance %s on %s\n", io.parallel.ToString().c_str(),
               io.backend.c_str());
  absl::StatusOr<std::unique_ptr<tandem::Instance>> inst =
      tandem::Instance::Create(model->weights, io);
  if (!inst.ok()) return Fail(inst.status().ToString());
  model->weights = tandem::LlamaWeights();  // the instance holds its own prepared shards
  std::string per_rank;
  for (int32_t r = 0; r < (*inst)->world(); ++r) {
    absl::StrAppend(&per_rank, r == 0 ? "" : " ", absl::SixDigits((*inst)->weight_bytes(r) / 1e6));
    const std::vector<std::string>& fallbacks = (*inst)->weight_f32_fallbacks(r);
    if (!fallbacks.empty()) {
      std::fprintf(stderr, "load: rank %d %s\n", r, absl::StrJoin(fallbacks, "; ").c_str());
    }
  }
  std::fprintf(stderr, "load: ready in %.2f s, resident weight MB per rank: %s\n",
               absl::ToDoubleSeconds(absl::Now() - t_load), per_rank.c_str());

  tandem::PrefillOptions po;
  po.max_prefill_tokens = absl::GetFlag(FLAGS_max_prefill_tokens);
  tandem::CombinedEngine engine(inst->get(), po, tandem::DecodeOptions{});
  tandem::GenerateRequest req;
  req.id = "cli";
  req.prompt = prompt;
  req.sampling =
      tandem::SamplingParams{absl::GetFlag(FLAGS_temperature), absl::GetFlag(FLAGS_top_k),
                             absl::GetFlag(FLAGS_top_p), absl::GetFlag(FLAGS_seed)};
  req.max_new_tokens = absl::GetFlag(FLAGS_max_tokens);
  if (tok != nullptr && !absl::GetFlag(FLAGS_ignore_eos)) req.stop_ids = tok->stop_ids();

  std::unique_ptr<tandem::StreamingDecoder> text;
  if (tok != nullptr)
    text = std::make_unique<tandem::StreamingDecoder>(*tok, /*skip_special=*/true);
  const absl::Time start = absl::Now();
  absl::Time first_token;
  int32_t generated = 0;
  absl::Notification done;
  absl::StatusOr<tandem::GenerateResult> result = absl::UnknownError("pending");
  absl::Status submitted = engine.Generate(
      std::move(req),
      [&](int32_t t) {
        if (generated++ == 0) first_token = absl::Now();
        if (text != nullptr) {
          std::fputs(text->Push(t).c_str(), stdout);
        } else {
          std::printf("%d ", t);
        }
        std::fflush(stdout);
      },
      [&](absl::StatusOr<tandem::GenerateResult> r) {
        result = std::move(r);
        done.Notify();
      });
  if (!submitted.ok()) return Fail(submitted.ToString());
  done.WaitForNotification();
  if (text != nullptr) std::fputs(text->Flush().c_str(), stdout);
  std::fputs("\n", stdout);
  if (!result.ok()) return Fail(result.status().ToString());
  const absl::Time end = absl::Now();
  const double prefill_s = absl::ToDoubleSeconds((generated > 0 ? first_token : end) - start);
  const double decode_s = absl::ToDoubleSeconds(end - (generated > 0 ? first_token : end));
  std::fprintf(stderr,
               "stats: prompt %zu tokens in %.3f s (%.1f tok/s); generated %d tokens, decode "
               "%.1f tok/s; finish: %s\n",
               prompt.size(), prefill_s, prompt.size() / std::max(prefill_s, 1e-9), generated,
               generated > 1 ? (generated - 1) / std::max(decode_s, 1e-9) : 0.0,
               std::string(tandem::FinishReasonName(result->reason)).c_str());
  return 0;
}
