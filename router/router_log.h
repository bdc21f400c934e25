// Where the router's log lines go: one line per finished request and one per node health
// transition. A function so tests can capture or silence it; it must be thread-safe.
#pragma once

#include <functional>
#include <string>

namespace tandem {

using LogFn = std::function<void(const std::string& line)>;

// Writes "<UTC time> tandem-router: <line>\n" to stderr (one write per line, so lines from
// different threads do not interleave).
void LogToStderr(const std::string& line);

}  // namespace tandem
