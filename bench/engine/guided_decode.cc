// guided_decode: what grammar-constrained decoding costs at decode time (issue 25 item 3).
//
// One instance of the real model (--model, default $TANDEM_MODEL) with a prefill and a decode
// engine. A round prefills --batch prompts, then adds all of them to the decode engine at once
// and times the decode until every one is done: decode tokens/s = tokens generated after the
// first ÷ that time. Rounds alternate unconstrained and constrained (the same prompts, seeds
// and temperature; the constrained ones decode under a --properties-property JSON Schema, every
// property required, through GrammarCache and GuidedDecoder exactly as the nodes do), so the
// machine's noise falls on both alike. The schema is long enough that no request completes it
// within --max_new_tokens: every round decodes batch × (max_new_tokens - 1) tokens at full
// batch, and both sides do the same amount of work.
//
// Also timed: compiling the schema (a cold GrammarCache), and what the masks cost per draw.
//
// RESULT guided_compile_ms=<compile time of the --properties-property schema, cold cache>
// RESULT guided_decode_tokens_per_s=<constrained decode tokens/s, best round>
// RESULT plain_decode_tokens_per_s=<unconstrained decode tokens/s, best round>
// RESULT guided_decode_ratio=<constrained ÷ unconstrained tokens/s (goal >= 0.9)>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "engine/block_manager.h"
#include "engine/decode_engine.h"
#include "engine/instance.h"
#include "engine/prefill_engine.h"
#include "model/format/model_loader.h"
#include "model/grammar/grammar_cache.h"
#include "model/grammar/json_schema.h"
#include "model/guided_sampling.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "GGUF file or HF directory (default: $TANDEM_MODEL)");
ABSL_FLAG(std::string, backend, "cpu", "compute backend (cpu, cuda)");
ABSL_FLAG(int32_t, batch, 16, "requests decoded together");
ABSL_FLAG(int32_t, max_new_tokens, 48, "tokens per request");
ABSL_FLAG(int32_t, rounds, 3, "rounds of each kind (alternating)");
ABSL_FLAG(int32_t, properties, 20, "properties of the schema");
ABSL_FLAG(double, temperature, 0.0, "sampling temperature (0: greedy, the lazy mask path)");

namespace tandem {
namespace {

constexpr absl::Duration kWait = absl::Minutes(10);

// {"type": "object", "properties": {"field_0": {"type": "string"}, "field_1": {"type":
// "integer"}, ...}, "required": [all], "additionalProperties": false}.
std::string Schema(int32_t properties) {
  nlohmann::ordered_json schema = {{"type", "object"}};
  nlohmann::ordered_json props = nlohmann::ordered_json::object();
  nlohmann::ordered_json required = nlohmann::ordered_json::array();
  const char* types[] = {"string", "integer", "boolean", "number"};
  for (int32_t i = 0; i < properties; ++i) {
    const std::string name = absl::StrCat("field_", i);
    props[name] = {{"type", types[i % 4]}};
    required.push_back(name);
  }
  schema["properties"] = props;
  schema["required"] = required;
  schema["additionalProperties"] = false;
  return schema.dump();
}

struct Round {
  double tokens_per_s = 0;
  int64_t tokens = 0;
  int32_t stopped = 0;  // requests that ended before max_new_tokens
};

absl::StatusOr<Round> RunRound(Instance* instance, const std::vector<std::vector<int32_t>>& prompts,
                               const std::string& grammar,
                               const std::shared_ptr<GrammarCache>& grammars,
                               const std::vector<int32_t>& stop_ids) {
  const int32_t max_new = absl::GetFlag(FLAGS_max_new_tokens);
  BlockManager blocks(instance->num_blocks());
  PrefillOptions po;
  po.grammars = grammars;
  DecodeOptions dopt;
  dopt.grammars = grammars;
  dopt.max_batch = static_cast<int32_t>(prompts.size());
  PrefillEngine prefill(instance, &blocks, po);
  DecodeEngine decode(instance, &blocks, dopt);
  SamplingParams sampling;
  sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  sampling.grammar = grammar;
  sampling.min_tokens_stop_ids = stop_ids;
  std::vector<DecodeJob> requests(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    PrefillJob pr;
    pr.id = absl::StrCat("r", i);
    pr.prompt = prompts[i];
    pr.sampling = sampling;
    pr.sampling.seed = i;
    pr.reserve_tokens = max_new;
    absl::Notification done;
    absl::StatusOr<PrefillResult> result = absl::UnknownError("pending");
    if (absl::Status s = prefill.Submit(pr,
                                        [&](absl::StatusOr<PrefillResult> r) {
                                          result = std::move(r);
                                          done.Notify();
                                        });
        !s.ok()) {
      return s;
    }
    if (!done.WaitForNotificationWithTimeout(kWait)) {
      return absl::DeadlineExceededError("prefill did not finish");
    }
    if (!result.ok()) return result.status();
    DecodeJob& dr = requests[i];
    dr.id = pr.id;
    dr.prompt_len = result->num_tokens;
    dr.first_token = result->first_token;
    dr.block_table = result->block_table;
    dr.sampling = pr.sampling;
    dr.max_new_tokens = max_new;
    dr.stop_ids = stop_ids;
    dr.next_step = 1;
    dr.context = prompts[i];
  }
  absl::Mutex mu;
  int32_t left = static_cast<int32_t>(requests.size());
  Round round;
  absl::Status failure;
  const absl::Time start = absl::Now();
  for (DecodeJob& dr : requests) {
    DecodeCallbacks cb;
    cb.on_token = [](int32_t) {};
    cb.on_done = [&](absl::Status s, FinishReason reason, int32_t generated) {
      absl::MutexLock lock(&mu);
      if (!s.ok()) failure = s;
      round.tokens += generated - 1;  // the first came from the prefill
      if (reason == FinishReason::kStop) ++round.stopped;
      --left;
    };
    if (absl::Status s = decode.Add(std::move(dr), std::move(cb)); !s.ok()) return s;
  }
  {
    absl::MutexLock lock(&mu);
    auto all_done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return left == 0; };
    if (!mu.AwaitWithTimeout(absl::Condition(&all_done), kWait)) {
      return absl::DeadlineExceededError("decode did not finish");
    }
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!failure.ok()) return failure;
  round.tokens_per_s = static_cast<double>(round.tokens) / seconds;
  return round;
}

int Main() {
  std::string path = absl::GetFlag(FLAGS_model);
  if (path.empty() && std::getenv("TANDEM_MODEL") != nullptr) path = std::getenv("TANDEM_MODEL");
  if (path.empty()) {
    std::fprintf(stderr, "guided_decode: --model or $TANDEM_MODEL is required\n");
    return 2;
  }
  absl::StatusOr<LoadedModel> model = LoadModel(path);
  if (!model.ok() || model->tokenizer == nullptr) {
    std::fprintf(stderr, "guided_decode: %s\n",
                 model.ok() ? "the model has no tokenizer" : model.status().ToString().c_str());
    return 1;
  }
  const int32_t batch = absl::GetFlag(FLAGS_batch);
  const int32_t max_new = absl::GetFlag(FLAGS_max_new_tokens);
  InstanceOptions io;
  io.backend = absl::GetFlag(FLAGS_backend);
  io.kv_bytes_per_rank = int64_t{512} << 20;
  absl::StatusOr<std::unique_ptr<Instance>> instance = Instance::Create(model->weights, io);
  if (!instance.ok()) {
    std::fprintf(stderr, "guided_decode: %s\n", instance.status().ToString().c_str());
    return 1;
  }
  const std::string schema = Schema(absl::GetFlag(FLAGS_properties));
  absl::StatusOr<std::string> grammar = JsonSchemaTextToGbnf(schema);
  if (!grammar.ok()) {
    std::fprintf(stderr, "guided_decode: %s\n", grammar.status().ToString().c_str());
    return 1;
  }
  // Compile time on a cold cache (the vocabulary is built first, as a node does at start).
  std::shared_ptr<GrammarCache> grammars = MakeGrammarCache(model->tokenizer.get());
  const absl::Time compile_start = absl::Now();
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> compiled =
      grammars->Get(GrammarKind::kGbnf, *grammar);
  const double compile_ms = absl::ToDoubleMilliseconds(absl::Now() - compile_start);
  if (!compiled.ok()) {
    std::fprintf(stderr, "guided_decode: %s\n", compiled.status().ToString().c_str());
    return 1;
  }
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < batch; ++i) {
    prompts.push_back(model->tokenizer->Encode(
        absl::StrCat("Record ", i, " of the inventory, as a JSON object with ",
                     absl::GetFlag(FLAGS_properties), " fields:\n")));
  }
  const std::vector<int32_t>& stops = model->tokenizer->stop_ids();
  Round best_plain, best_guided;
  for (int32_t r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    for (const bool guided : {false, true}) {
      absl::StatusOr<Round> round =
          RunRound(instance->get(), prompts, guided ? *grammar : "", grammars, stops);
      if (!round.ok()) {
        std::fprintf(stderr, "guided_decode: %s\n", round.status().ToString().c_str());
        return 1;
      }
      std::printf("round %d %-12s %8.1f tokens/s  (%lld tokens, %d stopped early)\n", r,
                  guided ? "json_schema" : "plain", round->tokens_per_s,
                  static_cast<long long>(round->tokens), round->stopped);
      Round& best = guided ? best_guided : best_plain;
      if (round->tokens_per_s > best.tokens_per_s) best = *round;
    }
  }
  std::printf(
      "model %s, backend %s, batch %d, max_new_tokens %d, temperature %.2f, "
      "%d-property schema (%d grammar positions)\n",
      path.c_str(), absl::GetFlag(FLAGS_backend).c_str(), batch, max_new,
      absl::GetFlag(FLAGS_temperature), absl::GetFlag(FLAGS_properties),
      (*compiled)->stats().positions);
  std::printf("RESULT guided_compile_ms=%.2f\n", compile_ms);
  std::printf("RESULT guided_decode_tokens_per_s=%.1f\n", best_guided.tokens_per_s);
  std::printf("RESULT plain_decode_tokens_per_s=%.1f\n", best_plain.tokens_per_s);
  std::printf("RESULT guided_decode_ratio=%.3f\n",
              best_guided.tokens_per_s / best_plain.tokens_per_s);
  if (best_guided.stopped > 0) {
    std::printf(
        "note: %d constrained requests completed the schema early; the ratio counts "
        "their fewer tokens\n",
        best_guided.stopped);
  }
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tandem::Main();
}
