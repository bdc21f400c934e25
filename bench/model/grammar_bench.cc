// Grammar engine speed on SmolLM2's vocabulary (issue 25 item 3, engine side):
//  * compile time of a 20-property JSON schema (goal < 50 ms) and of json_object;
//  * FillAllowedMask per step and per batch-of-16 step, walking 16 sequences through the schema
//    (each picks random allowed tokens, ending strings soon, like a model writing the object);
//  * IsAllowed per call (llama.cpp's lazy path: check the sampled token first).
// Usage: grammar_bench [--model=PATH] (default $TANDEM_MODEL). Prints RESULT lines (measured);
// GRAMMAR_BENCH_DEBUG=1 also prints the matcher state of every warm mask above 1 ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "model/format/gguf_file.h"
#include "model/grammar/compiled_grammar.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/matcher.h"
#include "model/tokenizer/gguf_tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "GGUF model (default: $TANDEM_MODEL)");
ABSL_FLAG(int32_t, batch, 16, "sequences stepped together");
ABSL_FLAG(int32_t, steps, 200, "decode steps per sequence");
ABSL_FLAG(int32_t, compile_repeats, 5, "compiles timed (best is reported)");

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// 20 properties of the usual kinds: strings (plain, bounded, enum, format), integers (bounded),
// numbers, booleans, arrays, a nested object.
nlohmann::ordered_json TwentyPropertySchema() {
  using J = nlohmann::ordered_json;
  J props = J::object();
  props["id"] = J{{"type", "integer"}, {"minimum", 0}};
  props["name"] = J{{"type", "string"}};
  props["email"] = J{{"type", "string"}, {"format", "email"}};
  props["age"] = J{{"type", "integer"}, {"minimum", 0}, {"maximum", 150}};
  props["score"] = J{{"type", "number"}};
  props["active"] = J{{"type", "boolean"}};
  props["role"] = J{{"enum", J::array({"admin", "user", "guest"})}};
  props["bio"] = J{{"type", "string"}, {"maxLength", 200}};
  props["tags"] = J{{"type", "array"}, {"items", J{{"type", "string"}}}, {"maxItems", 8}};
  props["created"] = J{{"type", "string"}, {"format", "date-time"}};
  props["country"] = J{{"type", "string"}, {"minLength", 2}, {"maxLength", 2}};
  props["city"] = J{{"type", "string"}};
  props["zip"] = J{{"type", "string"}, {"pattern", "^[0-9]{5}$"}};
  props["phone"] = J{{"type", J::array({"string", "null"})}};
  props["website"] = J{{"type", "string"}};
  props["rating"] = J{{"type", "integer"}, {"minimum", 1}, {"maximum", 5}};
  props["verified"] = J{{"type", "boolean"}};
  props["notes"] = J{{"type", "array"}, {"items", J{{"type", "string"}, {"maxLength", 40}}}};
  props["address"] =
      J{{"type", "object"},
        {"properties", J{{"street", J{{"type", "string"}}}, {"number", J{{"type", "integer"}}}}},
        {"required", J::array({"street"})}};
  props["uuid"] = J{{"type", "string"}, {"format", "uuid"}};
  J required = J::array();
  for (auto it = props.begin(); it != props.end(); ++it) required.push_back(it.key());
  return J{{"type", "object"},
           {"properties", props},
           {"required", required},
           {"additionalProperties", false}};
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::string path = absl::GetFlag(FLAGS_model);
  if (path.empty() && std::getenv("TANDEM_MODEL") != nullptr) path = std::getenv("TANDEM_MODEL");
  if (path.empty()) {
    std::fprintf(stderr, "grammar_bench: pass --model or set TANDEM_MODEL\n");
    return 2;
  }
  absl::StatusOr<std::unique_ptr<tandem::GgufFile>> file = tandem::GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "grammar_bench: %s\n", file.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<tandem::Tokenizer>> tok = tandem::TokenizerFromGguf(**file);
  if (!tok.ok()) {
    std::fprintf(stderr, "grammar_bench: %s\n", tok.status().ToString().c_str());
    return 1;
  }
  auto t0 = Clock::now();
  const tandem::Vocabulary vocab = tandem::Vocabulary::FromTokenizer(**tok);
  const double vocab_ms = Ms(t0, Clock::now());

  const std::string gbnf = *tandem::JsonSchemaToGbnf(TwentyPropertySchema());
  std::shared_ptr<const tandem::CompiledGrammar> grammar;
  double compile_ms = 1e9;
  for (int i = 0; i < absl::GetFlag(FLAGS_compile_repeats); ++i) {
    t0 = Clock::now();
    auto g = tandem::CompileGrammar(gbnf, vocab);
    compile_ms = std::min(compile_ms, Ms(t0, Clock::now()));
    if (!g.ok()) {
      std::fprintf(stderr, "grammar_bench: %s\n", g.status().ToString().c_str());
      return 1;
    }
    grammar = *g;
  }
  double object_ms = 1e9;
  for (int i = 0; i < absl::GetFlag(FLAGS_compile_repeats); ++i) {
    t0 = Clock::now();
    auto g = tandem::CompileGrammar(tandem::JsonObjectGbnf(), vocab);
    object_ms = std::min(object_ms, Ms(t0, Clock::now()));
  }

  // Decode-like walk: `batch` sequences, one mask each per step. The first pass meets every
  // grammar position for the first time (some token sets are computed then: "cold"); the second
  // replays the same tokens with new matchers over the same compiled grammar ("warm", what a
  // node serving a schema it has seen before does).
  const int batch = absl::GetFlag(FLAGS_batch), steps = absl::GetFlag(FLAGS_steps);
  std::vector<std::vector<int32_t>> chosen(batch);
  struct Pass {
    std::vector<double> step_ms, mask_us;
    double lazy_ns = 0;
    int64_t lazy_calls = 0;
  };
  auto run = [&](bool replay, Pass* out) {
    std::vector<tandem::GrammarMatcher> seqs(batch, tandem::GrammarMatcher(grammar));
    std::vector<size_t> cursor(batch, 0);
    std::vector<std::vector<uint64_t>> masks(batch);
    std::mt19937_64 rng(1);
    std::vector<int32_t> allowed, closers;
    for (int s = 0; s < steps; ++s) {
      const auto b0 = Clock::now();
      for (int i = 0; i < batch; ++i) {
        if (seqs[i].IsTerminated()) seqs[i] = tandem::GrammarMatcher(grammar);
        const auto m0 = Clock::now();
        seqs[i].FillAllowedMask(&masks[i]);
        out->mask_us.push_back(Ms(m0, Clock::now()) * 1000);
        if (replay && out->mask_us.back() > 1000 && std::getenv("GRAMMAR_BENCH_DEBUG")) {
          std::string text;
          for (size_t k = 0; k < cursor[i]; ++k) {
            if (chosen[i][k] >= 0) text += vocab.TokenBytes(chosen[i][k]);
          }
          std::fprintf(stderr, "slow mask %.0f us after ...%s\n%s", out->mask_us.back(),
                       text.substr(text.size() > 80 ? text.size() - 80 : 0).c_str(),
                       seqs[i].DebugString().c_str());
        }
      }
      out->step_ms.push_back(Ms(b0, Clock::now()));
      for (int i = 0; i < batch; ++i) {
        int32_t token;
        if (replay) {
          if (cursor[i] >= chosen[i].size()) continue;
          token = chosen[i][cursor[i]++];
          if (token < 0) {
            seqs[i] = tandem::GrammarMatcher(grammar);
            continue;
          }
        } else {
          allowed.clear();
          closers.clear();
          for (int32_t t = 0; t < vocab.size(); ++t) {
            if ((masks[i][t >> 6] >> (t & 63)) & 1) {
              allowed.push_back(t);
              if (vocab.TokenBytes(t).find_first_of("\"}]") != std::string_view::npos) {
                closers.push_back(t);
              }
            }
          }
          if (allowed.empty()) {
            chosen[i].push_back(-1);
            seqs[i] = tandem::GrammarMatcher(grammar);
            continue;
          }
          const std::vector<int32_t>& pool =
              (!closers.empty() && rng() % 4 == 0) ? closers : allowed;
          token = pool[rng() % pool.size()];
          chosen[i].push_back(token);
        }
        // Lazy path: IsAllowed on the token about to be taken and on a random one.
        const int32_t probe = static_cast<int32_t>(rng() % vocab.size());
        const auto l0 = Clock::now();
        volatile bool sink = seqs[i].IsAllowed(probe);
        sink = seqs[i].IsAllowed(token);
        (void)sink;
        out->lazy_ns += Ms(l0, Clock::now()) * 1e6;
        out->lazy_calls += 2;
        (void)seqs[i].Accept(token);
      }
    }
    std::sort(out->mask_us.begin(), out->mask_us.end());
    std::sort(out->step_ms.begin(), out->step_ms.end());
  };
  Pass cold, warm;
  run(false, &cold);
  run(true, &warm);
  auto mean = [](const std::vector<double>& v) {
    double m = 0;
    for (double x : v) m += x;
    return m / std::max<size_t>(v.size(), 1);
  };
  auto pct = [](const std::vector<double>& v, int p) { return v[v.size() * p / 100]; };
  const auto& st = grammar->stats();
  std::printf("vocabulary: %d tokens, adapter + trie %.1f ms\n", vocab.size(), vocab_ms);
  std::printf(
      "20-property schema: %d rules, %d positions, %lld uncertain tokens, %.1f MiB of "
      "token sets\n",
      st.rules, st.positions, static_cast<long long>(st.uncertain_tokens),
      st.cache_bytes / 1048576.0);
  std::printf("RESULT grammar_compile_ms_20prop=%.2f\n", compile_ms);
  std::printf("RESULT grammar_compile_ms_json_object=%.2f\n", object_ms);
  for (const auto& [name, p] : {std::pair<const char*, const Pass*>{"warm", &warm},
                                std::pair<const char*, const Pass*>{"cold", &cold}}) {
    std::printf("RESULT grammar_mask_%s_us_mean=%.1f\n", name, mean(p->mask_us));
    std::printf("RESULT grammar_mask_%s_us_p50=%.1f\n", name, pct(p->mask_us, 50));
    std::printf("RESULT grammar_mask_%s_us_p99=%.1f\n", name, pct(p->mask_us, 99));
    std::printf("RESULT grammar_mask_%s_us_max=%.1f\n", name, p->mask_us.back());
    std::printf("RESULT grammar_mask_%s_batch%d_step_ms_mean=%.3f\n", name, batch,
                mean(p->step_ms));
    std::printf("RESULT grammar_mask_%s_batch%d_step_ms_p99=%.3f\n", name, batch,
                pct(p->step_ms, 99));
    std::printf("RESULT grammar_is_allowed_%s_ns=%.0f\n", name,
                p->lazy_ns / std::max<int64_t>(p->lazy_calls, 1));
  }
  return 0;
}
