// JSON documents (nlohmann::json) as chat-template values: objects become dicts (key order
// kept), arrays lists, integers ints, other numbers floats. For request bodies (messages, tools)
// and tests. Pure; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "model/chat_template/value.h"

namespace tandem::jinja {

Value FromJson(const nlohmann::ordered_json& json);

}  // namespace tandem::jinja
