// The request body's `tandem` object: Tandem's own options on the OpenAI endpoints
// (docs/router.md#provenance-and-strict-mode). Pure; thread-safe.
//
//   "tandem": {"provenance": true, "strict": true}
//
// provenance: the response carries the request's final provenance (router/provenance.h) as
//   "tandem": {"provenance": {...}} at the top level of a whole response, and of a stream's last
//   chunk before [DONE] (the usage chunk with stream_options.include_usage, else the chunk with
//   the finish_reason). The x-tandem-provenance header is sent either way (openai_generate.h).
// strict: strict mode for this request (GenerateRequest.strict).
// Both default false; null or {} is the same as absent. Any other key, or a value that is not a
// boolean, is INVALID_ARGUMENT naming it (`tandem.KEY`): a misspelt "strict" must not be ignored.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"

namespace tandem {

struct TandemRequestOptions {
  bool provenance = false;
  bool strict = false;
};

// `body`: the whole request object.
[[nodiscard]] absl::StatusOr<TandemRequestOptions> ParseTandemOptions(const nlohmann::json& body);

// A response body or chunk (serialized JSON object) with "tandem": {"provenance": <provenance>}
// added at its top level; `provenance_json` is ProvenanceJson's output.
std::string WithTandemObject(const std::string& body_json, const std::string& provenance_json);

}  // namespace tandem
