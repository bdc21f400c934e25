// What served one Generate request, and strict mode's refusals (docs/router.md#provenance-and-
// strict-mode; docs/design.md#retry-and-resume for the recoveries themselves). Pure.
//
// The driver fills a Provenance as the request runs: every prefill call that returned KV (node,
// layout), every decode call that started serving (node, layout, KV bytes it pulled, whether it
// verified the KV digests — the decode node's DecodeServed), the prompt tokens the prefix cache
// served, and every node failure the router recovered from with how it recovered.
// ProvenanceJson is the one serialization: the HTTP header x-tandem-provenance, the `tandem`
// object of the OpenAI response, and the gRPC trailing metadata x-tandem-provenance carry it.
//
// Strict mode refuses the recoveries that silently mix KV or tokens from more than one path:
// re-prefilling after a KV transfer failed (the decode node never took the KV: a bad digest, a
// stale generation, an unreachable prefill node, a decode node lost before its first event) and
// resuming on another node after a decode node failed mid-answer. A prefill that fails before
// any KV exists is retried in strict mode too: nothing was produced, and the retry is what the
// first pick could have been. (Tandem has no colocated fallback to refuse: a disaggregated
// router never serves a request on one node.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tandem {

// "tp2 block16", "tp1 dcp2 block16", "tp4 pcp2 block16": tp always, pcp and dcp when > 1
// (dcp's interleave when > 1), then the KV block size in tokens. "" when tp < 1 (unknown).
std::string LayoutName(int32_t tp, int32_t pcp, int32_t dcp, int32_t interleave,
                       int32_t block_size);

// How the router recovers from a retryable node failure.
enum class Recovery {
  kPrefillRetry,  // a prefill (or colocated call) failed before any KV or token: another node
  kReprefill,     // the KV never reached a decode node: prefill again, decode elsewhere
  kResume,        // a decode node failed mid-answer: prompt + tokens prefilled, decode elsewhere
};
// "prefill_retry", "reprefill", "resume".
absl::string_view RecoveryName(Recovery recovery);

// True for the recoveries strict mode refuses: kReprefill and kResume.
bool StrictRefuses(Recovery recovery);

// The status a strict request ends with instead of `recovery` after `cause`: ABORTED (the client
// may send the request again) "strict mode: <what> refused after: <cause's message>".
absl::Status StrictRefusal(Recovery recovery, const absl::Status& cause);

struct PrefillHop {
  std::string node;    // the node's address
  std::string layout;  // LayoutName of the layout its KV handle names
};

struct DecodeHop {
  std::string node;
  std::string layout;      // LayoutName of the layout the node reported
  bool colocated = false;  // the node prefilled the prompt itself: no KV moved
  int64_t kv_bytes = 0;    // pulled from the prefill node
  bool digests_verified = false;
};

struct NodeFailure {
  std::string role;  // "prefill" | "decode"
  std::string node;
  std::string code;  // absl::StatusCodeToString of the failure
  Recovery recovery = Recovery::kPrefillRetry;
};

struct Provenance {
  // "disaggregated", "pipelined" (the first decode call pulled while the prefill ran) or
  // "colocated" (router --colocated).
  std::string mode = "disaggregated";
  bool strict = false;
  // False: what was known when the HTTP response's headers went out (a stream's first token);
  // true: the request's end.
  bool final = false;
  std::vector<PrefillHop> prefill;
  std::vector<DecodeHop> decode;
  int32_t cached_tokens = 0;  // prompt tokens the prefix cache served (Usage.cached_tokens)
  std::vector<NodeFailure> failures;
  // Strict mode: the recovery it refused (the request then failed); empty otherwise.
  std::string refused;

  // KV bytes moved between nodes: the decode hops' sum.
  int64_t kv_bytes() const;
  // Failures recovered from by `recovery`.
  int count(Recovery recovery) const;
  // Every decode hop that moved KV verified its digests; false when a hop did not, and also when
  // no KV moved (colocated, or no decode call started).
  bool digests_verified() const;
};

// Compact JSON (one line, ASCII only, so it is a valid HTTP header and gRPC metadata value):
//   {"final":true,"mode":"disaggregated","strict":false,
//    "prefill":[{"node":"10.0.0.1:7001","layout":"tp2 block16"}],
//    "decode":[{"node":"10.0.0.2:7002","layout":"tp1 block16","kv_bytes":1234,
//               "digests_verified":true}],
//    "kv_bytes":1234,"digests_verified":true,"cached_tokens":0,
//    "retries":0,"reprefills":0,"resumes":0,
//    "failures":[{"role":"decode","node":"...","code":"UNAVAILABLE","recovery":"resume"}]}
// and "refused":"resume" when strict mode refused a recovery. A colocated decode hop has
// "colocated":true. `failures` lists the failures recovered from (a refused or last one is the
// request's error instead); retries counts them all, reprefills and resumes those of each kind.
std::string ProvenanceJson(const Provenance& provenance);

}  // namespace tandem
