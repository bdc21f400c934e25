#include "tests/e2e/metrics_scrape.h"

#include <curl/curl.h>

#include <memory>
#include <regex>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tandem::testing {
namespace {

size_t AppendBody(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

}  // namespace

absl::StatusOr<std::string> MetricsUrlInLog(const std::string& log) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex("metrics at (http://[^ \n]+/metrics)"))) {
    return absl::NotFoundError("no 'metrics at http://.../metrics' line in the log");
  }
  return m[1].str();
}

absl::StatusOr<std::map<std::string, double>> ScrapeMetrics(const std::string& url) {
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
  std::string body;
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, 30000L);
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &body);
  if (const CURLcode rc = curl_easy_perform(curl.get()); rc != CURLE_OK) {
    return absl::UnavailableError(absl::StrCat("GET ", url, ": ", curl_easy_strerror(rc)));
  }
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    double v = 0;
    if (space != absl::string_view::npos && absl::SimpleAtod(line.substr(space + 1), &v)) {
      out[std::string(line.substr(0, space))] = v;
    }
  }
  return out;
}

}  // namespace tandem::testing
