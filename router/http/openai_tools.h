// OpenAI tool calling (docs/structured_output.md#tools): the request's `tools` / `tool_choice`,
// the grammar that enforces a call, and the parsing of the model's output into `tool_calls`.
// Pure; thread-safe.
//
// Formats, picked by the chat template's text (ToolCallFormatFor):
//   kMistral   the template mentions "[TOOL_CALLS]":   [TOOL_CALLS][{"name": .., "arguments":
//   {..}}] kLlama3    the template mentions "<|python_tag|>":  {"name": .., "parameters": {..}}
//   (optionally
//              after <|python_tag|>; several separated by ";")
//   kHermes    anything else (Qwen2/2.5/3, Hermes, and templates without tool support):
//              <tool_call>\n{"name": .., "arguments": {..}}\n</tool_call> (one block per call)
// A template that reads `tools` renders the tools, calls and results itself (ApplyTools in
// openai_prepare.cc) and its format is the one parsed. A template that never mentions `tools`
// cannot show them to the model; such requests get the Hermes instructions and the tool list as
// a system message (HermesToolSystemPrompt), as several servers do, and assistant tool calls /
// tool results are written into the conversation as Hermes text (docs/structured_output.md).
//
// tool_choice: "none" (no tools shown, plain text), "auto" (the model decides; the output is
// parsed), "required" (the grammar forces one call to one of the tools), {"type": "function",
// "function": {"name": N}} (the grammar forces one call to N). Forced calls' arguments are
// generated under the function's `parameters` schema, so they always parse and validate.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem {

enum class ToolCallFormat { kHermes, kLlama3, kMistral };

const char* ToolCallFormatName(ToolCallFormat format);
ToolCallFormat ToolCallFormatFor(absl::string_view chat_template);
// Whether the template reads the `tools` variable at all.
bool TemplateRendersTools(absl::string_view chat_template);

struct OpenAiTool {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON Schema; {"type": "object"} when absent
};

struct OpenAiTools {
  enum class Choice { kAuto, kNone, kRequired, kNamed };
  std::vector<OpenAiTool> tools;
  nlohmann::ordered_json tools_json;  // the body's `tools`, key order kept (for the template)
  Choice choice = Choice::kAuto;
  std::string named;  // kNamed: the function
};

// `tools` and `tool_choice` of a chat body (`raw_body` re-read keeping key order). nullopt when
// no tools are given (then tool_choice may only be "none" or "auto"). INVALID_ARGUMENT naming
// the field: a tool without a function name, duplicate names, a `parameters` schema the grammar
// compiler refuses (`tools[i].function.parameters`), a tool_choice naming no given tool.
[[nodiscard]] absl::StatusOr<std::optional<OpenAiTools>> ParseOpenAiTools(
    const nlohmann::json& body, absl::string_view raw_body);

// GBNF ("root") for exactly one call, in `format`, to the named tool (kNamed) or any of them
// (kRequired), its arguments valid against the tool's parameters. REQUIRES: choice is one of
// those two.
[[nodiscard]] absl::StatusOr<std::string> ToolCallGrammar(const OpenAiTools& tools,
                                                          ToolCallFormat format);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // JSON text of an object
};

struct ParsedToolOutput {
  std::string content;  // text outside the calls (trimmed); empty when none
  std::vector<ParsedToolCall> calls;
};

// The calls in `text`. A call block that does not parse as {"name": string, "arguments" (or
// "parameters"): object} is left in the content, as text.
ParsedToolOutput ParseToolCalls(absl::string_view text, ToolCallFormat format);

// Where in `text` a call may begin (the first byte of a marker, or of a partial marker at the
// end): content before it can be streamed; text.size() when none can. kLlama3 calls have no
// marker: a text whose first non-space byte is '{' may be a call (returns that position).
size_t ToolCallStart(absl::string_view text, ToolCallFormat format);

// The response's `tool_calls` array: {"id": "call_<id_prefix>_<i>", "type": "function",
// "function": {"name", "arguments" (JSON text)}} per call.
nlohmann::json ToolCallsJson(const std::vector<ParsedToolCall>& calls, absl::string_view id_prefix);
// The streamed form, as the OpenAI client assembles it: per call, a delta with index, id, type
// and function.name (arguments ""), then one with index and the arguments.
std::vector<nlohmann::json> ToolCallDeltas(const std::vector<ParsedToolCall>& calls,
                                           absl::string_view id_prefix);

// The system message shown to a model whose template cannot render tools (Hermes format).
std::string HermesToolSystemPrompt(const nlohmann::ordered_json& tools_json);
// An assistant turn's tool_calls (OpenAI objects) as Hermes text; a tool result as Hermes text.
std::string HermesToolCallsText(const nlohmann::json& tool_calls);
std::string HermesToolResponseText(absl::string_view content);

}  // namespace tandem
