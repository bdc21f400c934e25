#include "router/router_log.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tandem {

void LogToStderr(const std::string& line) {
  const std::string out =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()),
                   " tandem-router: ", line, "\n");
  std::fwrite(out.data(), 1, out.size(), stderr);
}

}  // namespace tandem
