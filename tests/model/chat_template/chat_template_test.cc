// The chat-template renderer on small templates whose expected output Python's jinja2 gave
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, transformers'
// tojson): whitespace control, loops, namespaces, macros, slices, filters, tests, formatting;
// the refusals that name the construct; raise_exception; and the chat formatter (SmolLM2's real
// template renders what FormatChatMl did; the ChatML fallback). Needs no Python.
#include "model/chat_template/chat_template.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/chat_template/chat_formatter.h"
#include "model/chat_template/json_value.h"
#include "model/tokenizer/chat.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

std::tm FixedNow() {
  std::tm t{};
  t.tm_year = 2024 - 1900;
  t.tm_mon = 6;
  t.tm_mday = 26;
  t.tm_hour = 10;
  t.tm_min = 30;
  t.tm_wday = 5;
  t.tm_yday = 207;
  return t;
}

absl::StatusOr<std::string> Render(const std::string& source, const std::string& context_json) {
  absl::StatusOr<std::shared_ptr<const ChatTemplate>> t = ChatTemplate::Parse(source);
  if (!t.ok()) return t.status();
  const jinja::Value ctx = jinja::FromJson(nlohmann::ordered_json::parse(context_json));
  return (*t)->Render(ctx.map(), FixedNow());
}

struct Case {
  const char* source;
  const char* context;
  const char* want;  // what jinja2 3.1 renders
};

// clang-format off
const Case kCases[] = {
    {"a\n  {% if true %}\n  b\n  {% endif %}\nc\n",
     "{}",
     "a\n  b\nc"},
    {"{{- ' x ' -}}\n  {{ 1 }}  {#- c -#}  {{ 2 }}",
     "{}",
     " x 12"},
    {"{% for m in ms %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ m }};{% endfor %}",
     "{\"ms\": [\"a\", \"b\"]}",
     "0TrueFalse2a;1FalseTrue2b;"},
    {"{% set ns = namespace(n=0) %}{% for i in range(4) if i is odd %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
     "{}",
     "4"},
    {"{% macro f(a, b='B') %}[{{ a }}|{{ b }}]{% endmacro %}{{ f(1) }}{{ f(2, b=3) }}",
     "{}",
     "[1|B][2|3]"},
    {"{{ 'Hello World'[1:5] }}|{{ [1,2,3][::-1] }}|{{ 'abc'[-1] }}",
     "{}",
     "ello|[3, 2, 1]|c"},
    {"{{ {'b': 1, 'a': [1, 2.5, none, true]} | tojson }}|{{ {'a': '\xc3\xa9""'} | tojson(indent=2) }}",
     "{}",
     "{\"b\": 1, \"a\": [1, 2.5, null, true]}|{\n  \"a\": \"\xc3\xa9""\"\n}"},
    {"{{ '  x  ' | trim }}|{{ 'a,b' .split(',') }}|{{ 'Hi' | upper }}{{ 'Hi' | lower }}|{{ 'ab' ~ 1 ~ none }}",
     "{}",
     "x|['a', 'b']|HIhi|ab1None"},
    {"{{ strftime_now('%d %b %Y') }}",
     "{}",
     "26 Jul 2024"},
    {"{% for x in [1,2,3,4] %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}",
     "{}",
     "2"},
    {"{{ 7 // 2 }} {{ -7 % 3 }} {{ 1 / 4 }} {{ 2 ** 8 }} {{ 0.1 + 0.2 }} {{ 1e20 }}",
     "{}",
     "3 2 0.25 256 0.30000000000000004 1e+20"},
    {"{{ x is defined }}{{ y is none }}{{ 'a' in 'cat' }}{{ 3 not in [1] }}{{ [1] is iterable }}{{ {} is mapping }}",
     "{\"y\": null}",
     "FalseTrueTrueTrueTrueTrue"},
    {"{{ users | selectattr('admin') | map(attribute='name') | join(', ') }}",
     "{\"users\": [{\"name\": \"a\", \"admin\": true}, {\"name\": \"b\", \"admin\": false}, {\"name\": \"c\", \"admin\": true}]}",
     "a, c"},
    {"{{ d | dictsort | list }}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
     "{\"d\": {\"b\": 2, \"a\": 1}}",
     "[('a', 1), ('b', 2)]|b=2;a=1;"},
    {"{{ 'x' | default('d') }}{{ missing | default('d') }}{{ '' | default('e', true) }}",
     "{}",
     "xde"},
    {"{{ '{} and {}'.format(1, 'two') }}|{{ '%s-%d' % ('a', 3) }}",
     "{}",
     "1 and two|a-3"},
    // A namespace holding itself (the renderer breaks the cycle once the render ends).
    {"{% set ns = namespace(a=1) %}{% set ns.self = ns %}{{ ns.self.self.a }}|{% set ns.l = [ns] %}{{ ns.l[0].a }}",
     "{}",
     "1|1"},
    {"{% set t %}inner {{ 1 }}{% endset %}[{{ t }}]",
     "{}",
     "[inner 1]"},
    {"{{ 'a' if false }}|{{ 'b' if true else 'c' }}|{{ none }}|{{ true }}|{{ [none, 'x'] }}",
     "{}",
     "|b|None|True|[None, 'x']"},
};
// clang-format on

TEST(ChatTemplateTest, RendersLikeJinja2) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.source);
    const absl::StatusOr<std::string> got = Render(c.source, c.context);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, c.want);
  }
}

TEST(ChatTemplateTest, RefusesWhatItCannotRenderNamingTheConstruct) {
  EXPECT_THAT(ChatTemplate::Parse("a\n{{ x | from_json }}").status().message(),
              HasSubstr("unsupported filter 'from_json' at line 2"));
  EXPECT_THAT(ChatTemplate::Parse("{% if x is prime %}{% endif %}").status().message(),
              HasSubstr("unsupported test 'prime' at line 1"));
  EXPECT_THAT(ChatTemplate::Parse("{{ x.encode('utf-8') }}").status().message(),
              HasSubstr("unsupported method 'encode' at line 1"));
  EXPECT_THAT(ChatTemplate::Parse("{{ cycler(1, 2) }}").status().message(),
              HasSubstr("unsupported function 'cycler' at line 1"));
  EXPECT_THAT(ChatTemplate::Parse("{% include 'x.jinja' %}").status().message(),
              HasSubstr("unsupported tag 'include'"));
  EXPECT_THAT(ChatTemplate::Parse("{% for x in y recursive %}{% endfor %}").status().message(),
              HasSubstr("recursive"));
  EXPECT_THAT(ChatTemplate::Parse("{% if x %}").status().message(), HasSubstr("endif"));
  EXPECT_THAT(ChatTemplate::Parse("{{ 'unterminated }}").status().message(),
              HasSubstr("unterminated string"));
}

TEST(ChatTemplateTest, RaiseExceptionCarriesTheTemplatesMessage) {
  const absl::StatusOr<std::string> got = Render(
      "{% if messages[0].role == 'system' %}{{ raise_exception('System role not "
      "supported') }}{% endif %}",
      R"({"messages": [{"role": "system", "content": "x"}]})");
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(IsRaisedByTemplate(got.status()));
  EXPECT_EQ(got.status().message(), "System role not supported");
  // An empty message still gives the client an error that says something (fuzz_chat_template).
  const absl::StatusOr<std::string> empty = Render("{{ raise_exception('') }}", "{}");
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(IsRaisedByTemplate(empty.status()));
  EXPECT_EQ(empty.status().message(),
            "the chat template raised an exception with an empty message");
}

TEST(ChatTemplateTest, EvaluationErrorsNameTheLineAndAreNotRaised) {
  const absl::StatusOr<std::string> got = Render("a\n{{ x.y }}", "{}");
  ASSERT_FALSE(got.ok());
  EXPECT_FALSE(IsRaisedByTemplate(got.status()));
  EXPECT_THAT(got.status().message(), HasSubstr("line 2"));
  EXPECT_THAT(got.status().message(), HasSubstr("'x' is undefined"));
  // The immutable sandbox refuses mutating methods, as transformers' does.
  EXPECT_THAT(Render("{% set l = [] %}{{ l.append(1) }}", "{}").status().message(),
              HasSubstr("SecurityError"));
  // An index too long for an integer is Python's ValueError, not an escaped std::out_of_range
  // (found by fuzz_chat_template).
  EXPECT_THAT(
      Render("{{ '{" + std::string(60, '7') + "}'.format(0, none) }}", "{}").status().message(),
      HasSubstr("ValueError: Too many decimal digits in format string"));
  EXPECT_THAT(Render("{{ '{7}'.format(0) }}", "{}").status().message(),
              HasSubstr("IndexError: Replacement index 7 out of range"));
}

// No template runs away with the stack, memory or time: nesting, built sizes and work are bounded.
TEST(ChatTemplateTest, RunawayTemplatesFailInsteadOfExhaustingTheProcess) {
  EXPECT_THAT(
      ChatTemplate::Parse("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}")
          .status()
          .message(),
      HasSubstr("nested too deeply"));
  EXPECT_THAT(Render("{{ 'x' * 1000000000000 }}", "{}").status().message(),
              HasSubstr("MemoryError"));
  EXPECT_THAT(Render("{{ 'x'.center(1000000000000) }}", "{}").status().message(),
              HasSubstr("MemoryError"));
  EXPECT_THAT(Render("{{ range(10000000) | length }}", "{}").status().message(),
              HasSubstr("range() longer than"));
  // Lists are bounded in items, not bytes: a 10-million-character string is allowed, its
  // characters as a list (one Value each, gigabytes) are not (found by fuzz_chat_template).
  EXPECT_THAT(Render("{{ ('x' * 10000000) | join(',') | length }}", "{}").status().message(),
              HasSubstr("MemoryError: a list of 10000000 items"));
  EXPECT_THAT(Render("{{ ([0] * 2000000) | length }}", "{}").status().message(),
              HasSubstr("MemoryError: a list of 2000000 items"));
  EXPECT_THAT(Render("{{ ('a ' * 2000000).split() | length }}", "{}").status().message(),
              HasSubstr("MemoryError: a list of 2000000 items"));
  EXPECT_THAT(Render("{{ ('a' * 1000000) | list | length }}", "{}").value_or("error"), "1000000");
  EXPECT_THAT(Render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "{}").status().message(),
              HasSubstr("RecursionError"));
  jinja::RenderLimits limits;
  limits.max_built_bytes = 1000;
  limits.max_built_items = 10;
  absl::StatusOr<std::shared_ptr<const ChatTemplate>> built =
      ChatTemplate::Parse("{{ ('x' * 1001) | length }}{{ 'abcdefghijk' | list }}");
  ASSERT_TRUE(built.ok());
  EXPECT_THAT((*built)->Render(jinja::Map(), FixedNow(), limits).status().message(),
              HasSubstr("MemoryError: a value of 1001 bytes (at most 1000)"));
  built = ChatTemplate::Parse("{{ 'abcdefghijk' | list }}");
  ASSERT_TRUE(built.ok());
  EXPECT_THAT((*built)->Render(jinja::Map(), FixedNow(), limits).status().message(),
              HasSubstr("MemoryError: a list of 11 items (at most 10)"));
  // The render's bounds were its own: the default applies again after it.
  EXPECT_TRUE(Render("{{ ('x' * 1001) | length }}", "{}").ok());
  limits = jinja::RenderLimits();
  limits.max_steps = 1000;
  absl::StatusOr<std::shared_ptr<const ChatTemplate>> t = ChatTemplate::Parse(
      "{% for i in range(100) %}{% for j in range(100) %}.{% endfor %}{% endfor %}");
  ASSERT_TRUE(t.ok());
  EXPECT_THAT((*t)->Render(jinja::Map(), FixedNow(), limits).status().message(),
              HasSubstr("more than 1000 statements"));
}

// SmolLM2-135M-Instruct's tokenizer.chat_template, as its GGUF ships it.
constexpr char kSmolLm2Template[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

TEST(ChatFormatterTest, SmolLm2TemplateRendersWhatChatMlFormattingDid) {
  absl::StatusOr<std::shared_ptr<const ChatFormatter>> f =
      ChatFormatter::Create(kSmolLm2Template, "SmolLM2", "<|im_start|>", "<|im_end|>");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->uses_template());
  EXPECT_FALSE((*f)->add_bos());
  const std::string system = DefaultSystemPrompt(kSmolLm2Template);
  ASSERT_FALSE(system.empty());
  const std::vector<std::vector<ChatMessage>> conversations = {
      {{"user", "What is the capital of France?"}},
      {{"system", "Be brief."}, {"user", "Hi"}},
      {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Caf\xc3\xa9?"}},
  };
  for (const auto& messages : conversations) {
    for (const bool prompt : {true, false}) {
      const absl::StatusOr<std::string> got = (*f)->Format(messages, prompt);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, FormatChatMl(messages, prompt, system));
    }
  }
}

TEST(ChatFormatterTest, WithoutATemplateChatMlIsTheFallback) {
  absl::StatusOr<std::shared_ptr<const ChatFormatter>> f =
      ChatFormatter::Create("", "test model", "<s>", "</s>");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE((*f)->uses_template());
  EXPECT_TRUE((*f)->add_bos());
  EXPECT_THAT((*f)->Describe(), HasSubstr("ChatML"));
  const std::vector<ChatMessage> messages = {{"user", "Hi"}};
  EXPECT_EQ(*(*f)->Format(messages), FormatChatMl(messages, true));
}

TEST(ChatFormatterTest, PassesSpecialTokensAndRefusesUnsupportedTemplatesAtCreate) {
  absl::StatusOr<std::shared_ptr<const ChatFormatter>> f = ChatFormatter::Create(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}"
      "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}",
      "test", "<s>", "</s>");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*(*f)->Format({{"user", "Hi"}}), "<s>[user]Hi</s>[assistant]");
  const absl::StatusOr<std::shared_ptr<const ChatFormatter>> bad =
      ChatFormatter::Create("{{ messages | frobnicate }}", "model.gguf", "<s>", "</s>");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("model.gguf"));
  EXPECT_THAT(bad.status().message(), HasSubstr("unsupported filter 'frobnicate' at line 1"));
}

}  // namespace
}  // namespace tandem
