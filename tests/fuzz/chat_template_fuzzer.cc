// Fuzz target: chat templates, which come with model files and --chat_template. The input is
// split at its first NUL: the template source before it, a user message after (the part of a
// chat a client controls). A template ChatTemplate::Parse accepts is rendered over a fixed
// conversation (system, user, assistant, user; a tools list; the generation prompt) under tight
// RenderLimits. Invariants: Parse and Render fail with a status, never a crash; rendering is
// deterministic (the same result twice).
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/chat_template/chat_template.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using tandem::jinja::Map;
using tandem::jinja::Value;

Value Message(const char* role, std::string content) {
  Map m;
  m.Set("role", Value(role));
  m.Set("content", Value(std::move(content)));
  return Value::Dict(std::move(m));
}

Map Variables(const std::string& user) {
  Map params;
  params.Set("type", Value("object"));
  Map function;
  function.Set("name", Value("get_weather"));
  function.Set("description", Value("Get the weather."));
  function.Set("parameters", Value::Dict(std::move(params)));
  Map tool;
  tool.Set("type", Value("function"));
  tool.Set("function", Value::Dict(std::move(function)));
  Map vars;
  vars.Set("messages", Value::Seq({Message("system", "Be brief."), Message("user", user),
                                   Message("assistant", "Hi!"), Message("user", user)}));
  vars.Set("tools", Value::Seq({Value::Dict(std::move(tool))}));
  vars.Set("documents", Value::None());
  vars.Set("add_generation_prompt", Value(true));
  vars.Set("bos_token", Value("<s>"));
  vars.Set("eos_token", Value("</s>"));
  return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const absl::string_view source = input.substr(0, nul);
  const std::string user =
      nul == absl::string_view::npos ? "Hello" : std::string(input.substr(nul + 1));
  const absl::StatusOr<std::shared_ptr<const tandem::ChatTemplate>> tmpl =
      tandem::ChatTemplate::Parse(source);
  if (!tmpl.ok()) {
    TANDEM_FUZZ_CHECK(!tmpl.status().message().empty());
    return 0;
  }
  tandem::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_built_bytes = 1 << 20;  // a run explores, it does not copy 64 MiB strings around
  limits.max_built_items = 1 << 16;
  limits.max_range = 1000;
  limits.max_steps = 100000;
  limits.max_call_depth = 50;
  std::tm now{};
  now.tm_year = 124;
  now.tm_mon = 6;
  now.tm_mday = 26;
  const Map vars = Variables(user);
  const absl::StatusOr<std::string> first = (*tmpl)->Render(vars, now, limits);
  const absl::StatusOr<std::string> second = (*tmpl)->Render(vars, now, limits);
  TANDEM_FUZZ_CHECK(first.ok() == second.ok());
  TANDEM_FUZZ_CHECK(!first.ok() || *first == *second);
  TANDEM_FUZZ_CHECK(first.ok() || !first.status().message().empty());
  return 0;
}
