// Fuzz target: the grammar engine's front ends (issue 25), which take text from requests
// (response_format json_schema, guided_regex, guided_json, tool parameter schemas). The first
// byte picks the front end (GBNF, JSON Schema, regex; the low two bits), the rest is its text.
// Invariants: parsing and compiling fail with a status, never a crash; a parsed GBNF prints
// back to text that parses to the same text; on a compiled grammar, a short walk over a small
// vocabulary has FillAllowedMask == IsAllowed == "Accept succeeds" for every token at every
// state, and Accept of an allowed token succeeds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/grammar/compiled_grammar.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/json_schema.h"
#include "model/grammar/matcher.h"
#include "model/grammar/regex.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

const tandem::Vocabulary& Vocab() {
  static const tandem::Vocabulary* v = [] {
    std::vector<std::string> bytes;
    for (int b = 0x20; b < 0x7F; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
    for (const char* s : {"\n",  "\t",  "\\",    "\xC3", "\xA9", "é",    "日", "\xF0\x9F\x98\x80",
                          "{\"", "\":", "\",",   "ab",   "true", "null", "12", "\"}",
                          "]",   "\\n", "\\u00", "  ",   "\n  ", "<s>"}) {
      bytes.push_back(s);
    }
    std::vector<bool> never(bytes.size(), false);
    never.back() = true;
    return new tandem::Vocabulary(*tandem::Vocabulary::FromTokenBytes(bytes, never));
  }();
  return *v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 8192) return 0;
  const int mode = data[0] & 3;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  absl::StatusOr<std::string> gbnf;
  if (mode == 0 || mode == 3) {
    gbnf = text;
    absl::StatusOr<tandem::GbnfGrammar> parsed = tandem::ParseGbnf(text);
    if (parsed.ok()) {
      const std::string printed = parsed->ToString();
      absl::StatusOr<tandem::GbnfGrammar> again = tandem::ParseGbnf(printed);
      TANDEM_FUZZ_CHECK(again.ok());
      TANDEM_FUZZ_CHECK(again->ToString() == printed);
    }
  } else if (mode == 1) {
    nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text, nullptr, false);
    if (doc.is_discarded()) return 0;
    gbnf = tandem::JsonSchemaToGbnf(doc, "root");
    // What the converter writes always parses.
    if (gbnf.ok()) TANDEM_FUZZ_CHECK(tandem::ParseGbnf(*gbnf).ok());
  } else {
    gbnf = tandem::RegexToGbnf(text);
    if (gbnf.ok()) TANDEM_FUZZ_CHECK(tandem::ParseGbnf(*gbnf).ok());
  }
  if (!gbnf.ok()) return 0;
  absl::StatusOr<std::shared_ptr<const tandem::CompiledGrammar>> g =
      tandem::CompileGrammar(*gbnf, Vocab());
  if (!g.ok()) return 0;
  tandem::GrammarMatcher m(*g);
  std::vector<uint64_t> mask;
  const tandem::Vocabulary& v = Vocab();
  for (int step = 0; step < 12 && !m.IsTerminated(); ++step) {
    m.FillAllowedMask(&mask);
    int32_t pick = -1;
    for (int32_t t = 0; t < v.size(); ++t) {
      const bool bit = (mask[t >> 6] >> (t & 63)) & 1;
      tandem::GrammarMatcher copy = m;
      TANDEM_FUZZ_CHECK(bit == copy.Accept(t).ok());
      TANDEM_FUZZ_CHECK(bit == m.IsAllowed(t));
      // A deterministic choice driven by the input.
      if (bit && (pick < 0 || (data[(step + t) % size] & 1))) pick = t;
    }
    if (pick < 0) break;
    TANDEM_FUZZ_CHECK(m.Accept(pick).ok());
  }
  return 0;
}
