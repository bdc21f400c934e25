#!/usr/bin/env bash
# TTFT with KV digests on vs off (issue 28 item 4: digests + check <= 1% of TTFT end to end),
# measured in one run with tandem-bench against a real cluster (deploy/cluster.sh): two prefill
# instances — one with --kv_digests=true, one with --kv_digests=false, otherwise the same — and
# one decode instance, one thread each; two routers started here, each in front of one prefill
# and the shared decode instance. Runs alternate between the two routers (ROUNDS rounds, the
# same prompts for both within a round, the order flipping every round), one request at a time,
# so load drift on the machine hits both alike. The decode node checks what it pulls from the
# digests-on prefill (fused into the copy over shared memory) and trusts the other.
#
#   bash bench/serve/kv_digest_ttft.sh [OUT_DIR]
#
# Environment: TANDEM_MODEL (default ~/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf),
#   TANDEM_BUILD_DIR (default build), PROMPT_LEN (default 2048), CHUNK (default 512: the prefill
#   nodes' --max_prefill_tokens), ROUNDS (default 6), REQUESTS (default 3: per run), OUTPUT_LEN
#   (default 8).
# Output: OUT_DIR (default /tmp/tandem-kv-digest-ttft): one JSON per run, logs, summary.md with
#   `RESULT kv_digest_ttft_share=<median over rounds of (TTFT p50 on / TTFT p50 off) - 1>` (goal
#   <= 0.01), the same for the end-to-end latency (kv_digest_e2e_share), the decode node's
#   digest counters (every digests-on request verified, none mismatched), and the digests' time
#   measured directly, which resolves far below the on/off ratios' run-to-run noise:
#   `RESULT kv_digest_time_share_of_ttft=<(prefill-0's tandem_kv_digest_compute_seconds_total +
#   the decode node's tandem_kv_digest_check_seconds_total, scraped before and after all rounds)
#   per digests-on request / mean TTFT of the digests-on runs>` — per request because the
#   counters also see each run's warmup request, which the JSONs leave out (the requests are
#   counted by tandem_kv_digests_verified_total; the digests-off runs move neither counter).
#   The check's time is summed whether it overlapped the pull or not, so this is an upper bound
#   on what the digests add to TTFT.
set -euo pipefail
# shellcheck source=bench/serve/ab_rounds.sh
. "$(dirname "$0")/ab_rounds.sh"

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
readonly REPO
model=${TANDEM_MODEL:-$HOME/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf}
build=$(realpath -m "$REPO/${TANDEM_BUILD_DIR:-build}")
prompt_len=${PROMPT_LEN:-2048}
chunk=${CHUNK:-512}
rounds=${ROUNDS:-6}
requests=${REQUESTS:-3}
output_len=${OUTPUT_LEN:-8}
out=$(realpath -m "${1:-/tmp/tandem-kv-digest-ttft}")
bench="$build/bench/serve/tandem-bench"

log() { echo "kv_digest_ttft.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

ab_check_inputs
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.txt "$out"/summary.md "$out"/*-router.port

conf="$out/kv_digest.conf"
cat > "$conf" <<CONF
# kv_digest_ttft.sh: prefill 0 with digests, prefill 1 without; 1 decode; one thread each.
model=$model
build_dir=$build
name=bench-kv-digest
startup_timeout_s=300
router   listen=127.0.0.1:0
prefill  tp=1 threads_per_rank=1 kv_budget_mb=512 ucx_tls=sm,self max_prefill_tokens=$chunk kv_digests=true
prefill  tp=1 threads_per_rank=1 kv_budget_mb=512 ucx_tls=sm,self max_prefill_tokens=$chunk kv_digests=false
decode   tp=1 threads_per_rank=1 kv_budget_mb=512 ucx_tls=sm,self
CONF
export TANDEM_RUN_DIR="$out/cluster"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  "$REPO/deploy/cluster.sh" down "$conf" >/dev/null 2>&1 || true
}
trap cleanup EXIT

log "starting 2 prefill (digests on / off, --max_prefill_tokens=$chunk) + 1 decode, one thread each"
"$REPO/deploy/cluster.sh" up "$conf" > "$out/cluster-up.txt"
decode_addr="127.0.0.1:$(cat "$TANDEM_RUN_DIR/decode-0.port")"
# start_router NAME PREFILL_INDEX: a router in front of that prefill and the decode instance.
start_router() {
  "$build/router/tandem-router" --listen=127.0.0.1:0 --http_listen=127.0.0.1:0 \
    --port_file="$out/$1-router.port" --model="$model" \
    --prefill="127.0.0.1:$(cat "$TANDEM_RUN_DIR/prefill-$2.port")" \
    --decode="$decode_addr" > "$out/$1-router.log" 2>&1 &
  pids+=($!)
  local _
  for _ in $(seq 1 600); do
    [ -s "$out/$1-router.port" ] && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || die "router $1 exited: $(tail -5 "$out/$1-router.log")"
    sleep 0.1
  done
  die "router $1 did not report its port"
}
start_router on 0
start_router off 1
on="127.0.0.1:$(cat "$out/on-router.port")"
off="127.0.0.1:$(cat "$out/off-router.port")"
log "digests on: router $on; digests off: router $off; decode $decode_addr"

# scrape NODE: the digest counters of NODE (prefill-0, decode-0), one "name value" a line.
scrape() {
  curl -sf "http://127.0.0.1:$(cat "$TANDEM_RUN_DIR/$1.metrics_port")/metrics" |
    grep -E '^tandem_kv_digest(s_verified_total|_compute_seconds_total|_check_seconds_total) ' ||
    die "no digest counters from $1"
}
{ scrape prefill-0; scrape decode-0; } > "$out/digest-time-before.txt"
ab_rounds "$rounds" 2000 on "$on" off "$off"
{ scrape prefill-0; scrape decode-0; } > "$out/digest-time-after.txt"
metrics_url="http://127.0.0.1:$(cat "$TANDEM_RUN_DIR/decode-0.metrics_port")/metrics"
curl -sf "$metrics_url" | grep -E '^tandem_kv_digest' > "$out/decode-digest-metrics.txt" || true

python3 - "$out" "$rounds" "$prompt_len" "$chunk" <<'PY'
import json, os, statistics, sys
out, rounds, prompt_len, chunk = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def rep(name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)["report"]
lines = [f"prompt {prompt_len} tokens, --max_prefill_tokens={chunk}, one request at a time", "",
         "| run | ok/sent | TTFT p50 ms | TTFT max ms | e2e p50 ms |", "|---|---|---|---|---|"]
ttft_ratio, e2e_ratio = [], []
on_ttft_ms, on_ttft_count = 0.0, 0
for r in range(1, rounds + 1):
    x = {m: rep(f"{m}_r{r}") for m in ("on", "off")}
    for m in ("on", "off"):
        lines.append(f"| {m}_r{r} | {x[m]['requests_ok']}/{x[m]['requests_sent']} | "
                     f"{x[m]['ttft']['p50_ms']:.1f} | {x[m]['ttft']['max_ms']:.1f} | "
                     f"{x[m]['e2e']['p50_ms']:.1f} |")
        if x[m]["requests_ok"] != x[m]["requests_sent"]:
            sys.exit(f"run {m}_r{r}: {x[m]['requests_ok']} of {x[m]['requests_sent']} requests ok")
    ttft_ratio.append(x["on"]["ttft"]["p50_ms"] / x["off"]["ttft"]["p50_ms"])
    on_ttft_ms += x["on"]["ttft"]["mean_ms"] * x["on"]["ttft"]["count"]
    on_ttft_count += x["on"]["ttft"]["count"]
    e2e_ratio.append(x["on"]["e2e"]["p50_ms"] / x["off"]["e2e"]["p50_ms"])
with open(os.path.join(out, "decode-digest-metrics.txt")) as f:
    lines += ["", "decode node: " + "; ".join(l.strip() for l in f if l.strip())]
def counters(name):
    with open(os.path.join(out, name)) as f:
        return {k: float(v) for k, v in (l.split() for l in f if l.strip())}
before, after = counters("digest-time-before.txt"), counters("digest-time-after.txt")
delta = {k: after[k] - before[k] for k in after}
on_requests = delta["tandem_kv_digests_verified_total"]  # the warmups' included
if on_requests <= 0 or on_ttft_count == 0:
    sys.exit("no digests-on request was verified: nothing to measure the digests' time on")
compute_s = delta["tandem_kv_digest_compute_seconds_total"]
check_s = delta["tandem_kv_digest_check_seconds_total"]
mean_ttft_s = on_ttft_ms / on_ttft_count / 1000.0
lines += [f"digests' time over {on_requests:.0f} digests-on requests (warmups included): "
          f"compute {compute_s * 1000:.2f} ms (prefill), check {check_s * 1000:.2f} ms (decode); "
          f"{(compute_s + check_s) / on_requests * 1000:.3f} ms per request against a mean "
          f"TTFT of {mean_ttft_s * 1000:.1f} ms ({on_ttft_count} measured requests)"]
time_share = (compute_s + check_s) / on_requests / mean_ttft_s
lines += ["", "per round, on / off: TTFT p50 " + ", ".join(f"{v:.4f}" for v in ttft_ratio)
          + "; e2e p50 " + ", ".join(f"{v:.4f}" for v in e2e_ratio),
          f"RESULT kv_digest_ttft_share={statistics.median(ttft_ratio) - 1:.4f}",
          f"RESULT kv_digest_e2e_share={statistics.median(e2e_ratio) - 1:.4f}",
          f"RESULT kv_digest_time_share_of_ttft={time_share:.5f}"]
text = "\n".join(lines) + "\n"
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write(text)
print(text)
PY
