#include "router/http/openai_tools.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/grammar/gbnf.h"
#include "model/grammar/json_schema.h"
#include "router/http/openai_request.h"

namespace tandem {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr char kHermesOpen[] = "<tool_call>";
constexpr char kHermesClose[] = "</tool_call>";
constexpr char kMistralMarker[] = "[TOOL_CALLS]";
constexpr char kPythonTag[] = "<|python_tag|>";

// {"name": string, "arguments"|"parameters": object} -> a call.
std::optional<ParsedToolCall> CallFrom(const OrderedJson& j) {
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string()) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end() || !args->is_object()) return std::nullopt;
  return ParsedToolCall{name->get<std::string>(), args->dump()};
}

std::optional<OrderedJson> ParseJson(absl::string_view text) {
  OrderedJson j = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

std::string Trimmed(absl::string_view s) { return std::string(absl::StripAsciiWhitespace(s)); }

ParsedToolOutput ParseHermes(absl::string_view text) {
  ParsedToolOutput out;
  std::string content;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find(kHermesOpen, pos);
    if (open == absl::string_view::npos) break;
    const size_t body = open + sizeof(kHermesOpen) - 1;
    const size_t close = text.find(kHermesClose, body);
    const absl::string_view inner = text.substr(
        body, close == absl::string_view::npos ? absl::string_view::npos : close - body);
    const size_t end =
        close == absl::string_view::npos ? text.size() : close + sizeof(kHermesClose) - 1;
    std::optional<OrderedJson> j = ParseJson(inner);
    std::optional<ParsedToolCall> call = j.has_value() ? CallFrom(*j) : std::nullopt;
    absl::StrAppend(&content, text.substr(pos, open - pos));
    if (call.has_value()) {
      out.calls.push_back(*std::move(call));
    } else {
      absl::StrAppend(&content, text.substr(open, end - open));
    }
    pos = end;
  }
  absl::StrAppend(&content, text.substr(std::min(pos, text.size())));
  out.content = Trimmed(content);
  return out;
}

ParsedToolOutput ParseMistral(absl::string_view text) {
  ParsedToolOutput out;
  const size_t at = text.find(kMistralMarker);
  if (at == absl::string_view::npos) {
    out.content = Trimmed(text);
    return out;
  }
  const absl::string_view rest = text.substr(at + sizeof(kMistralMarker) - 1);
  std::optional<OrderedJson> j = ParseJson(rest);
  if (j.has_value() && j->is_object()) j = OrderedJson::array({*j});
  if (!j.has_value() || !j->is_array()) {
    out.content = Trimmed(text);
    return out;
  }
  for (const OrderedJson& c : *j) {
    std::optional<ParsedToolCall> call = CallFrom(c);
    if (!call.has_value()) {
      out.calls.clear();
      out.content = Trimmed(text);
      return out;
    }
    out.calls.push_back(*std::move(call));
  }
  out.content = Trimmed(text.substr(0, at));
  return out;
}

ParsedToolOutput ParseLlama3(absl::string_view text) {
  ParsedToolOutput out;
  absl::string_view body = absl::StripAsciiWhitespace(text);
  std::string prefix;
  if (const size_t tag = body.find(kPythonTag); tag != absl::string_view::npos) {
    prefix = Trimmed(body.substr(0, tag));
    body = absl::StripAsciiWhitespace(body.substr(tag + sizeof(kPythonTag) - 1));
  }
  if (!absl::StartsWith(body, "{")) {
    out.content = Trimmed(text);
    return out;
  }
  // One call, or several separated by ';'.
  std::vector<ParsedToolCall> calls;
  std::optional<OrderedJson> whole = ParseJson(body);
  if (whole.has_value()) {
    std::optional<ParsedToolCall> call = CallFrom(*whole);
    if (call.has_value()) calls.push_back(*std::move(call));
  } else {
    for (absl::string_view part : absl::StrSplit(body, ';')) {
      std::optional<OrderedJson> j = ParseJson(part);
      std::optional<ParsedToolCall> call = j.has_value() ? CallFrom(*j) : std::nullopt;
      if (!call.has_value()) {
        calls.clear();
        break;
      }
      calls.push_back(*std::move(call));
    }
  }
  if (calls.empty()) {
    out.content = Trimmed(text);
    return out;
  }
  out.calls = std::move(calls);
  out.content = prefix;
  return out;
}

// A rule name for tool i's argument rules.
std::string ArgsRule(size_t i) { return absl::StrCat("tool", i, "-args"); }

}  // namespace

const char* ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
  }
  return "?";
}

ToolCallFormat ToolCallFormatFor(absl::string_view chat_template) {
  if (absl::StrContains(chat_template, kMistralMarker)) return ToolCallFormat::kMistral;
  if (absl::StrContains(chat_template, kPythonTag)) return ToolCallFormat::kLlama3;
  return ToolCallFormat::kHermes;
}

bool TemplateRendersTools(absl::string_view chat_template) {
  return absl::StrContains(chat_template, "tools");
}

absl::StatusOr<std::optional<OpenAiTools>> ParseOpenAiTools(const Json& body,
                                                            absl::string_view raw_body) {
  const auto tools_it = body.find("tools");
  const bool has_tools = tools_it != body.end() && !tools_it->is_null() &&
                         !(tools_it->is_array() && tools_it->empty());
  OpenAiTools out;
  if (const auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
    if (*c == "none") {
      out.choice = OpenAiTools::Choice::kNone;
    } else if (*c == "auto") {
      out.choice = OpenAiTools::Choice::kAuto;
    } else if (*c == "required") {
      out.choice = OpenAiTools::Choice::kRequired;
    } else if (c->is_object() && c->value("type", "") == "function" && c->contains("function") &&
               (*c)["function"].is_object() && (*c)["function"].contains("name") &&
               (*c)["function"]["name"].is_string()) {
      out.choice = OpenAiTools::Choice::kNamed;
      out.named = (*c)["function"]["name"].get<std::string>();
    } else {
      return OpenAiInvalidParam("tool_choice",
                                "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
  }
  if (!has_tools) {
    if (out.choice == OpenAiTools::Choice::kRequired || out.choice == OpenAiTools::Choice::kNamed) {
      return OpenAiInvalidParam("tool_choice",
                                "'tool_choice' requires 'tools' (a call was asked for but no "
                                "tool was given)");
    }
    return std::nullopt;
  }
  if (!tools_it->is_array()) return OpenAiInvalidParam("tools", "'tools' must be an array");
  const OrderedJson ordered = OrderedJson::parse(raw_body, nullptr, false);
  if (ordered.is_discarded()) return absl::InvalidArgumentError("request body is not valid JSON");
  out.tools_json = ordered["tools"];
  absl::flat_hash_set<std::string> names;
  for (size_t i = 0; i < out.tools_json.size(); ++i) {
    const OrderedJson& t = out.tools_json[i];
    const std::string field = absl::StrCat("tools[", i, "]");
    if (!t.is_object() || t.value("type", "function") != "function" || !t.contains("function") ||
        !t["function"].is_object()) {
      return OpenAiInvalidParam(field, absl::StrCat("'", field,
                                                    "' must be {\"type\": \"function\", "
                                                    "\"function\": {\"name\": ...}}"));
    }
    const OrderedJson& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty()) {
      return OpenAiInvalidParam(absl::StrCat(field, ".function.name"),
                                absl::StrCat("'", field, ".function.name' must be a string"));
    }
    OpenAiTool tool;
    tool.name = f["name"].get<std::string>();
    if (!names.insert(tool.name).second) {
      return OpenAiInvalidParam(
          absl::StrCat(field, ".function.name"),
          absl::StrCat("'", field, ".function.name': '", tool.name, "' is given twice"));
    }
    tool.parameters = f.contains("parameters") && !f["parameters"].is_null()
                          ? f["parameters"]
                          : OrderedJson{{"type", "object"}};
    // Refused now, before any prefill, even if the model never calls it.
    if (absl::StatusOr<std::string> g = JsonSchemaToGbnf(tool.parameters, "args"); !g.ok()) {
      const std::string p = absl::StrCat(field, ".function.parameters");
      return OpenAiInvalidParam(p, absl::StrCat("'", p, "': ", g.status().message()));
    }
    out.tools.push_back(std::move(tool));
  }
  if (out.choice == OpenAiTools::Choice::kNamed && !names.contains(out.named)) {
    return OpenAiInvalidParam("tool_choice", absl::StrCat("'tool_choice' names '", out.named,
                                                          "', which is not in 'tools'"));
  }
  return out;
}

absl::StatusOr<std::string> ToolCallGrammar(const OpenAiTools& tools, ToolCallFormat format) {
  std::vector<std::string> alternatives;
  std::string rules;
  for (size_t i = 0; i < tools.tools.size(); ++i) {
    const OpenAiTool& tool = tools.tools[i];
    if (tools.choice == OpenAiTools::Choice::kNamed && tool.name != tools.named) continue;
    absl::StatusOr<std::string> args = JsonSchemaToGbnf(tool.parameters, ArgsRule(i));
    if (!args.ok()) return args.status();
    absl::StrAppend(&rules, *args, "\n");
    const std::string name_json = Json(tool.name).dump();
    const char* key = format == ToolCallFormat::kLlama3 ? "parameters" : "arguments";
    alternatives.push_back(
        absl::StrCat(GbnfLiteral(absl::StrCat("{\"name\": ", name_json, ", \"", key, "\": ")), " ",
                     ArgsRule(i), " ", GbnfLiteral("}")));
  }
  const std::string call = absl::StrCat("call ::= ", absl::StrJoin(alternatives, " | "), "\n");
  std::string root;
  switch (format) {
    case ToolCallFormat::kHermes:
      root = absl::StrCat("root ::= ", GbnfLiteral("<tool_call>\n"), " call ",
                          GbnfLiteral("\n</tool_call>"), "\n");
      break;
    case ToolCallFormat::kLlama3:
      root = "root ::= call\n";
      break;
    case ToolCallFormat::kMistral:
      // The marker is a control token in Mistral's vocabulary (which grammars never emit): the
      // forced call is the JSON list alone, which ParseToolCalls also accepts after it.
      root = absl::StrCat("root ::= ", GbnfLiteral("["), " call ", GbnfLiteral("]"), "\n");
      break;
  }
  return absl::StrCat(root, call, rules);
}

ParsedToolOutput ParseToolCalls(absl::string_view text, ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(text);
    case ToolCallFormat::kLlama3:
      return ParseLlama3(text);
    case ToolCallFormat::kMistral: {
      // A forced Mistral call has no marker (see ToolCallGrammar).
      const absl::string_view t = absl::StripLeadingAsciiWhitespace(text);
      if (!absl::StrContains(text, kMistralMarker) && absl::StartsWith(t, "[")) {
        return ParseMistral(absl::StrCat(kMistralMarker, t));
      }
      return ParseMistral(text);
    }
  }
  return ParsedToolOutput{Trimmed(text), {}};
}

size_t ToolCallStart(absl::string_view text, ToolCallFormat format) {
  if (format == ToolCallFormat::kLlama3) {
    const size_t first = text.find_first_not_of(" \t\r\n");
    if (first == absl::string_view::npos) return text.size();
    if (text[first] == '{' || text.substr(first, 1) == "<") return first;
    const size_t tag = text.find(kPythonTag);
    return tag == absl::string_view::npos ? text.size() : tag;
  }
  const absl::string_view marker = format == ToolCallFormat::kHermes ? kHermesOpen : kMistralMarker;
  if (const size_t at = text.find(marker); at != absl::string_view::npos) return at;
  // A marker cut by the end of the text so far.
  for (size_t n = std::min(marker.size() - 1, text.size()); n > 0; --n) {
    if (absl::EndsWith(text, marker.substr(0, n))) return text.size() - n;
  }
  return text.size();
}

Json ToolCallsJson(const std::vector<ParsedToolCall>& calls, absl::string_view id_prefix) {
  Json out = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    out.push_back({{"id", absl::StrCat("call_", id_prefix, "_", i)},
                   {"type", "function"},
                   {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
  }
  return out;
}

std::vector<Json> ToolCallDeltas(const std::vector<ParsedToolCall>& calls,
                                 absl::string_view id_prefix) {
  std::vector<Json> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    out.push_back({{"index", i},
                   {"id", absl::StrCat("call_", id_prefix, "_", i)},
                   {"type", "function"},
                   {"function", {{"name", calls[i].name}, {"arguments", ""}}}});
    out.push_back({{"index", i}, {"function", {{"arguments", calls[i].arguments}}}});
  }
  return out;
}

std::string HermesToolSystemPrompt(const OrderedJson& tools_json) {
  std::string list;
  for (const OrderedJson& t : tools_json) absl::StrAppend(&list, "\n", t.dump());
  return absl::StrCat(
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
      list,
      "\n</tools>\n\nFor each function call, return a json object with function name and "
      "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
      "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
}

std::string HermesToolCallsText(const Json& tool_calls) {
  std::vector<std::string> blocks;
  for (const Json& c : tool_calls) {
    if (!c.is_object() || !c.contains("function")) continue;
    const Json& f = c["function"];
    Json args = f.value("arguments", Json::object());
    if (args.is_string()) {
      Json parsed = Json::parse(args.get<std::string>(), nullptr, false);
      if (!parsed.is_discarded()) args = std::move(parsed);
    }
    OrderedJson call;  // name first, as the model writes it
    call["name"] = f.value("name", "");
    call["arguments"] = OrderedJson::parse(args.dump());
    blocks.push_back(absl::StrCat(kHermesOpen, "\n", call.dump(), "\n", kHermesClose));
  }
  return absl::StrJoin(blocks, "\n");
}

std::string HermesToolResponseText(absl::string_view content) {
  return absl::StrCat("<tool_response>\n", content, "\n</tool_response>");
}

}  // namespace tandem
