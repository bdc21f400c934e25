// Tandem's chat-template renderer against Python's jinja2, on real templates: llama.cpp's
// models/templates/*.jinja (deploy/fetch-llamacpp-data.sh; TANDEM_LLAMACPP_DATA names the
// directory holding templates/). jinja2_oracle.py renders each template over a fixed set of
// conversations with transformers' apply_chat_template settings and writes the results; nothing
// of it is committed. For every template the renderer accepts, each conversation must give the
// same bytes, the same raise_exception message, or an error where jinja2 errs. A template counts
// as identical when all conversations agree and at least one renders. Refused templates are
// listed with the renderer's reason. Prints RESULT chat_templates_identical_to_jinja2=<n>.
//
// Argument: the source directory (for the script and the project's .venv/). The Python used is
// $TANDEM_PYTHON, else .venv/bin/python (deploy/python-env.sh installs jinja2 there), else
// python3 — the first that imports jinja2.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/chat_template/chat_setup.h"
#include "model/chat_template/chat_template.h"
#include "model/chat_template/json_value.h"
#include "model/format/gguf_file.h"
#include "model/tokenizer/gguf_tokenizer.h"

namespace tandem {
namespace {

using Json = nlohmann::ordered_json;

std::string g_source_dir;

// Templates of the model families Tandem supports: each must be accepted and identical.
constexpr const char* kRequired[] = {
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    "Qwen-Qwen3-0.6B.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja",
    "google-gemma-2-2b-it.jinja",
    "HuggingFaceTB-SmolLM3-3B.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "ibm-granite-granite-3.3-2B-Instruct.jinja",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
};
constexpr int kMinIdentical = 20;

std::string DataDir() {
  const char* dir = std::getenv("TANDEM_LLAMACPP_DATA");
  return dir == nullptr ? "" : dir;
}

bool ImportsJinja2(const std::string& python) {
  const std::string cmd = absl::StrCat("'", python, "' -c 'import jinja2' >/dev/null 2>&1");
  return std::system(cmd.c_str()) == 0;
}

std::string FindPython() {
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("TANDEM_PYTHON")) candidates.push_back(p);
  candidates.push_back(absl::StrCat(g_source_dir, "/.venv/bin/python"));
  candidates.push_back("python3");
  for (const std::string& c : candidates) {
    if (ImportsJinja2(c)) return c;
  }
  return "";
}

// The date jinja2_oracle.py's strftime_now formats (FIXED_NOW).
std::tm FixedNow() {
  std::tm t{};
  t.tm_year = 2024 - 1900;
  t.tm_mon = 6;
  t.tm_mday = 26;
  t.tm_hour = 10;
  t.tm_min = 30;
  t.tm_wday = 5;    // a Friday
  t.tm_yday = 207;  // 0-based day of the year
  return t;
}

std::string FirstDifference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i < 40 ? 0 : i - 40;
  return absl::StrCat("first difference at byte ", i, ": want '",
                      absl::CEscape(want.substr(from, 120)), "'\n got '",
                      absl::CEscape(got.substr(from, 120)), "'");
}

class ChatTemplateOracleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DataDir().empty()) {
      GTEST_SKIP() << "TANDEM_LLAMACPP_DATA is not set; run deploy/fetch-llamacpp-data.sh and "
                      "point it at the directory it prints (deploy/test.sh does this)";
    }
  }
};

TEST_F(ChatTemplateOracleTest, AcceptedTemplatesRenderLikeJinja2) {
  const std::string python = FindPython();
  ASSERT_FALSE(python.empty())
      << "no Python with jinja2: run deploy/python-env.sh (it installs jinja2 into .venv/) or "
         "install Debian's python3-jinja2 (deploy/install-deps.sh)";
  char tmpl[] = "/tmp/tandem-jinja2-oracle-XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string out_path = tmpl;
  const std::string cmd = absl::StrCat("'", python, "' '", g_source_dir,
                                       "/tests/model/chat_template/jinja2_oracle.py' '", DataDir(),
                                       "/templates' '", out_path, "'");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out_path);
  std::stringstream buf;
  buf << in.rdbuf();
  std::remove(out_path.c_str());
  const Json oracle = Json::parse(buf.str());
  std::cout << "jinja2 " << oracle["jinja2_version"].get<std::string>() << " via " << python
            << "\n";

  std::vector<jinja::Map> conversations;
  std::vector<std::string> conversation_names;
  for (const Json& c : oracle["conversations"]) {
    conversation_names.push_back(c["name"].get<std::string>());
    jinja::Map vars;
    vars.Set("tools", jinja::Value::None());
    vars.Set("documents", jinja::Value::None());
    for (const auto& [k, v] : c["kwargs"].items()) vars.Set(k, jinja::FromJson(v));
    conversations.push_back(std::move(vars));
  }
  ASSERT_FALSE(conversations.empty());

  int identical = 0, accepted = 0, refused = 0;
  std::vector<std::string> identical_names;
  for (const Json& t : oracle["templates"]) {
    const std::string name = t["name"].get<std::string>();
    std::ifstream f(absl::StrCat(DataDir(), "/templates/", name));
    std::stringstream source;
    source << f.rdbuf();
    absl::StatusOr<std::shared_ptr<const ChatTemplate>> parsed = ChatTemplate::Parse(source.str());
    if (!parsed.ok()) {
      ++refused;
      std::cout << "REFUSED   " << name << ": " << parsed.status().message() << "\n";
      continue;
    }
    ++accepted;
    if (t.contains("compile_error")) {
      ADD_FAILURE() << name << ": accepted, but jinja2 cannot compile it: "
                    << t["compile_error"].get<std::string>();
      continue;
    }
    int agree = 0, rendered = 0;
    const Json& renders = t["renders"];
    for (size_t i = 0; i < conversations.size(); ++i) {
      const Json& want = renders[i];
      const absl::StatusOr<std::string> got = (*parsed)->Render(conversations[i], FixedNow());
      const std::string where = absl::StrCat(name, " / ", conversation_names[i]);
      if (want.contains("output")) {
        const std::string expected = want["output"].get<std::string>();
        if (!got.ok()) {
          ADD_FAILURE() << where << ": jinja2 renders, Tandem fails: " << got.status();
        } else if (*got != expected) {
          ADD_FAILURE() << where << ": output differs; " << FirstDifference(expected, *got);
        } else {
          ++agree;
          ++rendered;
        }
      } else if (want.contains("raised")) {
        const std::string message = want["raised"].get<std::string>();
        if (got.ok()) {
          ADD_FAILURE() << where << ": jinja2 raises '" << message << "', Tandem renders";
        } else if (!IsRaisedByTemplate(got.status()) || got.status().message() != message) {
          ADD_FAILURE() << where << ": jinja2 raises '" << message << "', Tandem: " << got.status();
        } else {
          ++agree;
        }
      } else {
        const std::string error = want["error"].get<std::string>();
        if (got.ok()) {
          ADD_FAILURE() << where << ": jinja2 fails (" << error << "), Tandem renders";
        } else if (IsRaisedByTemplate(got.status())) {
          ADD_FAILURE() << where << ": jinja2 fails (" << error
                        << "), Tandem's template raised: " << got.status();
        } else {
          ++agree;
        }
      }
    }
    const bool same = agree == static_cast<int>(conversations.size()) && rendered > 0;
    std::cout << (same            ? "IDENTICAL "
                  : rendered == 0 ? "NO-RENDER "
                                  : "DIFFERENT ")
              << name << ": " << agree << "/" << conversations.size() << " conversations agree ("
              << rendered << " rendered, the rest raise or fail in both)\n";
    if (same) {
      ++identical;
      identical_names.push_back(name);
    }
  }
  std::cout << "templates: " << oracle["templates"].size() << ", accepted " << accepted
            << ", refused " << refused << "\n";
  std::cout << "RESULT chat_templates_identical_to_jinja2=" << identical << "\n";
  EXPECT_GE(identical, kMinIdentical);
  for (const char* required : kRequired) {
    EXPECT_NE(std::find(identical_names.begin(), identical_names.end(), required),
              identical_names.end())
        << required << " (a supported family's template) is not accepted and identical";
  }
}

// A template rendered for its own vocabulary (llama.cpp's ggml-vocab-*.gguf): every special
// token the text holds becomes that token's single id (encoded with parse_special, as chat
// requests are), the text decodes back, and the template's end-of-turn marker is a stop id.
struct Pairing {
  const char* template_file;
  const char* vocab;
  const char* end_of_turn;
  bool round_trips;  // Phi-3's special tokens swallow the whitespace after them
};
constexpr Pairing kPairings[] = {
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", "llama-bpe", "<|eot_id|>", true},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", "llama-bpe", "<|eot_id|>", true},
    {"Qwen-Qwen2.5-7B-Instruct.jinja", "qwen2", "<|im_end|>", true},
    {"Qwen3.5-4B.jinja", "qwen35", "<|im_end|>", true},
    {"microsoft-Phi-3.5-mini-instruct.jinja", "phi-3", "<|end|>", false},
};

int64_t Occurrences(absl::string_view text, absl::string_view needle) {
  int64_t n = 0;
  for (size_t pos = text.find(needle); pos != absl::string_view::npos;
       pos = text.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

TEST_F(ChatTemplateOracleTest, RenderedSpecialTokensMapToTheirIds) {
  for (const Pairing& p : kPairings) {
    SCOPED_TRACE(p.template_file);
    absl::StatusOr<std::unique_ptr<GgufFile>> file =
        GgufFile::Open(absl::StrCat(DataDir(), "/vocab/ggml-vocab-", p.vocab, ".gguf"));
    ASSERT_TRUE(file.ok()) << file.status();
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = TokenizerFromGguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.status();
    absl::StatusOr<ChatTemplateSource> source =
        ChatTemplateFromFile(absl::StrCat(DataDir(), "/templates/", p.template_file));
    ASSERT_TRUE(source.ok()) << source.status();
    absl::StatusOr<std::shared_ptr<const ChatFormatter>> chat =
        MakeChatFormatter(*source, tok->get());
    ASSERT_TRUE(chat.ok()) << chat.status();
    const std::vector<ChatMessage> messages = {
        {"system", "You are concise."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};
    absl::StatusOr<std::string> text = (*chat)->Format(messages, /*add_generation_prompt=*/true);
    ASSERT_TRUE(text.ok()) << text.status();
    const std::vector<int32_t> ids =
        (*tok)->Encode(*text, /*parse_special=*/true, /*with_bos=*/(*chat)->add_bos());
    if (p.round_trips) {
      EXPECT_EQ((*tok)->Decode(ids), *text);
    }
    int specials = 0;
    for (int32_t id = 0; id < (*tok)->vocab_size(); ++id) {
      if (!(*tok)->IsSpecial(id)) continue;
      const absl::StatusOr<absl::string_view> marker = (*tok)->TokenText(id);
      if (!marker.ok() || marker->size() < 2) continue;
      const int64_t in_text = Occurrences(*text, *marker);
      if (in_text == 0) continue;
      ++specials;
      EXPECT_EQ(std::count(ids.begin(), ids.end(), id), in_text)
          << "'" << *marker << "' (id " << id << ") occurs " << in_text << " times in the text";
    }
    EXPECT_GE(specials, 2);
    absl::StatusOr<int32_t> eot = (*tok)->SpecialTokenId(p.end_of_turn);
    ASSERT_TRUE(eot.ok()) << eot.status();
    EXPECT_TRUE((*tok)->IsStop(*eot)) << p.end_of_turn << " does not end generation";
    EXPECT_NE(std::find(ids.begin(), ids.end(), *eot), ids.end());
    std::cout << p.template_file << " on ggml-vocab-" << p.vocab << ": " << ids.size()
              << " tokens, " << specials << " distinct special tokens, each as its id\n";
  }
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc > 1) tandem::g_source_dir = argv[1];
  return RUN_ALL_TESTS();
}
