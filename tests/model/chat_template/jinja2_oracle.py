#!/usr/bin/env python3
"""The chat-template oracle: renders real chat templates with Python's jinja2 exactly as Hugging Face
transformers' apply_chat_template does, over a fixed set of conversations, and writes the results as
JSON for tests/model/chat_template/chat_template_oracle_test.cc to compare Tandem's renderer with.

transformers' settings (utils/chat_template_utils.py): ImmutableSandboxedEnvironment with
trim_blocks and lstrip_blocks, the loopcontrols extension and the {% generation %} tag, a `tojson`
filter that is json.dumps (ensure_ascii=False, no HTML escaping), and the globals raise_exception
and strftime_now. Render arguments: messages, tools (None when absent), documents (None),
add_generation_prompt and the special tokens. strftime_now uses a fixed date here (FIXED_NOW) so
the output is reproducible; the C++ side renders with the same date.

    jinja2_oracle.py TEMPLATE_DIR OUT.json

Nothing of the output is committed: the templates are third-party data fetched by
deploy/fetch-llamacpp-data.sh, and the expected outputs are made from them at test time.
"""
import datetime
import glob
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime.datetime(2024, 7, 26, 10, 30, 0)

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}, {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the local time in a timezone.",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string"}},
            "required": ["timezone"],
        },
    },
}]

SYSTEM = {"role": "system", "content": "You are a concise assistant."}
USER = {"role": "user", "content": "What is the capital of France?"}
ASSISTANT = {"role": "assistant", "content": "Paris."}
USER2 = {"role": "user", "content": "And of Italy?"}
ASSISTANT2 = {"role": "assistant", "content": "Rome."}
WEATHER_USER = {"role": "user", "content": "What's the weather in Paris?"}
TOOL_CALL = {
    "id": "call12345",  # Mistral's templates want 9 alphanumeric characters
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}},
}
TOOL_CALL_MSG = {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
               "content": "{\"temperature\": 18, \"unit\": \"celsius\"}"}

# (name, render arguments besides the special tokens)
CONVERSATIONS = [
    ("system_user", {"messages": [SYSTEM, USER], "add_generation_prompt": True}),
    ("user_only", {"messages": [{"role": "user", "content":
                                 "Say \"hi\" \u2014 caf\u00e9, \u65e5\u672c\u8a9e!\n  Then 'bye'."}],
                   "add_generation_prompt": True}),
    ("user_only_no_prompt", {"messages": [USER], "add_generation_prompt": False}),
    ("multi_turn", {"messages": [SYSTEM, USER, ASSISTANT, USER2], "add_generation_prompt": True}),
    ("multi_turn_closed", {"messages": [USER, ASSISTANT, USER2, ASSISTANT2],
                           "add_generation_prompt": False}),
    ("tools", {"messages": [SYSTEM, WEATHER_USER], "tools": TOOLS, "add_generation_prompt": True}),
    ("tools_no_system", {"messages": [WEATHER_USER], "tools": TOOLS,
                         "add_generation_prompt": True}),
    ("tool_call", {"messages": [WEATHER_USER, TOOL_CALL_MSG, TOOL_RESULT], "tools": TOOLS,
                   "add_generation_prompt": True}),
    ("tool_call_answered", {"messages": [SYSTEM, WEATHER_USER, TOOL_CALL_MSG, TOOL_RESULT,
                                         {"role": "assistant", "content": "It is 18 \u00b0C."},
                                         {"role": "user", "content": "Thanks!"}],
                            "tools": TOOLS, "add_generation_prompt": True}),
    # OpenAI's shape: arguments as a JSON string, two calls in one turn, content None.
    ("parallel_calls", {"messages": [WEATHER_USER, {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "call12345", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}},
            {"id": "call67890", "type": "function",
             "function": {"name": "get_time", "arguments": "{\"timezone\": \"Europe/Paris\"}"}}]},
        TOOL_RESULT,
        {"role": "tool", "tool_call_id": "call67890", "name": "get_time", "content": "10:30"}],
        "tools": TOOLS, "add_generation_prompt": True}),
    ("content_parts", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Describe Paris."}, {"type": "text", "text": " Briefly."}]}],
        "add_generation_prompt": True}),
    ("thinking_history", {"messages": [USER, {
        "role": "assistant", "content": "<think>\nThe capital is Paris.\n</think>\n\nParis."},
        USER2], "add_generation_prompt": True}),
    ("reasoning_content", {"messages": [SYSTEM, USER, {
        "role": "assistant", "reasoning_content": "France's capital is Paris.", "content": "Paris."},
        USER2], "add_generation_prompt": True, "enable_thinking": False}),
]
SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}


class AssistantTracker(Extension):
    """transformers' {% generation %} ... {% endgeneration %}: renders its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(
            lineno)

    def _generation_support(self, caller):
        return caller()


class RaisedException(TemplateError):
    pass


def make_env():
    def raise_exception(message):
        raise RaisedException(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    template_dir, out_path = sys.argv[1], sys.argv[2]
    env = make_env()
    result = {
        "jinja2_version": jinja2.__version__,
        "fixed_now": FIXED_NOW.isoformat(),
        "conversations": [{"name": n, "kwargs": dict(kw, **SPECIAL_TOKENS)}
                          for n, kw in CONVERSATIONS],
        "templates": [],
    }
    for path in sorted(glob.glob(os.path.join(template_dir, "*.jinja"))):
        with open(path, encoding="utf-8") as f:
            source = f.read()
        entry = {"name": os.path.basename(path), "renders": []}
        try:
            template = env.from_string(source)
        except Exception as e:  # noqa: BLE001 - any compile failure is recorded
            entry["compile_error"] = f"{type(e).__name__}: {e}"
            result["templates"].append(entry)
            continue
        for _, kwargs in CONVERSATIONS:
            args = {"tools": None, "documents": None}
            args.update(kwargs)
            args.update(SPECIAL_TOKENS)
            try:
                entry["renders"].append({"output": template.render(**args)})
            except RaisedException as e:
                entry["renders"].append({"raised": str(e)})
            except Exception as e:  # noqa: BLE001 - any render failure is recorded
                entry["renders"].append({"error": f"{type(e).__name__}: {e}"})
        result["templates"].append(entry)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
