#!/usr/bin/env bash
# TTFT with and without pipelined KV transfer (router --pipelined_transfer, docs/kv_transfer.md),
# measured in one run with tandem-bench: one prefill + one decode instance (one thread each,
# deploy/cluster.sh) and two routers in front of the same two nodes — the cluster's own
# (unpipelined) and a second one started here with --pipelined_transfer=true. Runs alternate
# between the two routers (ROUNDS rounds, the same prompts for both routers within a round),
# one request at a time, so load drift on the machine hits both alike.
#
#   flock /tmp/tandem-build.lock bash bench/serve/pipelined_ttft.sh [OUT_DIR]
#
# Environment: TANDEM_MODEL (default ~/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf),
#   TANDEM_BUILD_DIR (default build), PROMPT_LEN (default 4096), CHUNK (default 512: the prefill
#   node's --max_prefill_tokens), ROUNDS (default 3), REQUESTS (default 2: per run), OUTPUT_LEN
#   (default 16).
# Output: OUT_DIR (default /tmp/tandem-pipelined-ttft): one JSON per run, logs, summary.md with
#   `RESULT pipelined_ttft_p50_vs_unpipelined=<median of the pipelined runs' p50 / the same of the
#   unpipelined runs>`, `RESULT pipelined_itl_max_vs_unpipelined` (the longest inter-token gap,
#   which is the first one: decode call + pull + first step) and the decode node's pipelined
#   counters (pulls made while a prefill ran).
set -euo pipefail
# shellcheck source=bench/serve/ab_rounds.sh
. "$(dirname "$0")/ab_rounds.sh"

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
readonly REPO
model=${TANDEM_MODEL:-$HOME/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf}
build=$(realpath -m "$REPO/${TANDEM_BUILD_DIR:-build}")
prompt_len=${PROMPT_LEN:-4096}
chunk=${CHUNK:-512}
rounds=${ROUNDS:-3}
requests=${REQUESTS:-2}
output_len=${OUTPUT_LEN:-16}
out=$(realpath -m "${1:-/tmp/tandem-pipelined-ttft}")
bench="$build/bench/serve/tandem-bench"

log() { echo "pipelined_ttft.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

ab_check_inputs
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.txt "$out"/summary.md "$out"/piped-router.port

conf="$out/pipelined.conf"
cat > "$conf" <<CONF
# pipelined_ttft.sh: 1 prefill + 1 decode instance, one thread each; the router is unpipelined.
model=$model
build_dir=$build
name=bench-pipelined
startup_timeout_s=300
router   listen=127.0.0.1:0
prefill  tp=1 threads_per_rank=1 kv_budget_mb=768 ucx_tls=sm,self max_prefill_tokens=$chunk
decode   tp=1 threads_per_rank=1 kv_budget_mb=768 ucx_tls=sm,self
CONF
export TANDEM_RUN_DIR="$out/cluster"
piped_pid=""
cleanup() {
  if [ -n "$piped_pid" ]; then kill "$piped_pid" 2>/dev/null || true; wait "$piped_pid" 2>/dev/null || true; fi
  "$REPO/deploy/cluster.sh" down "$conf" >/dev/null 2>&1 || true
}
trap cleanup EXIT

log "starting 1 prefill (--max_prefill_tokens=$chunk) + 1 decode, one thread each"
router=$("$REPO/deploy/cluster.sh" up "$conf" | tail -n 1)
prefill_addr="127.0.0.1:$(cat "$TANDEM_RUN_DIR/prefill-0.port")"
decode_addr="127.0.0.1:$(cat "$TANDEM_RUN_DIR/decode-0.port")"
"$build/router/tandem-router" --listen=127.0.0.1:0 --http_listen=127.0.0.1:0 \
  --port_file="$out/piped-router.port" --model="$model" --prefill="$prefill_addr" \
  --decode="$decode_addr" --pipelined_transfer=true > "$out/piped-router.log" 2>&1 &
piped_pid=$!
for _ in $(seq 1 600); do
  [ -s "$out/piped-router.port" ] && break
  kill -0 "$piped_pid" 2>/dev/null || die "pipelined router exited: $(tail -5 "$out/piped-router.log")"
  sleep 0.1
done
[ -s "$out/piped-router.port" ] || die "pipelined router did not report its port"
piped="127.0.0.1:$(cat "$out/piped-router.port")"
log "unpipelined router $router, pipelined router $piped, prefill $prefill_addr, decode $decode_addr"

ab_rounds "$rounds" 1000 unpipelined "$router" pipelined "$piped"
metrics_url="http://127.0.0.1:$(cat "$TANDEM_RUN_DIR/decode-0.metrics_port")/metrics"
curl -sf "$metrics_url" | grep -E '^tandem_kv_pipelined' > "$out/decode-pipelined-metrics.txt" || true

python3 - "$out" "$rounds" "$prompt_len" "$chunk" <<'PY'
import json, os, statistics, sys
out, rounds, prompt_len, chunk = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def rep(name):
    with open(os.path.join(out, name + ".json")) as f:
        return json.load(f)["report"]
lines = [f"prompt {prompt_len} tokens, --max_prefill_tokens={chunk}, one request at a time", "",
         "| run | ok/sent | TTFT p50 ms | TTFT max ms | ITL max ms | TPOT p50 ms | e2e p50 ms |",
         "|---|---|---|---|---|---|---|"]
p50 = {"unpipelined": [], "pipelined": []}
itl_max = {"unpipelined": [], "pipelined": []}
for r in range(1, rounds + 1):
    for mode in ("unpipelined", "pipelined"):
        x = rep(f"{mode}_r{r}")
        p50[mode].append(x["ttft"]["p50_ms"])
        itl_max[mode].append(x["itl"]["max_ms"])
        lines.append(f"| {mode}_r{r} | {x['requests_ok']}/{x['requests_sent']} | "
                     f"{x['ttft']['p50_ms']:.0f} | {x['ttft']['max_ms']:.0f} | {x['itl']['max_ms']:.1f} | "
                     f"{x['tpot']['p50_ms']:.1f} | {x['e2e']['p50_ms']:.0f} |")
u, p = statistics.median(p50["unpipelined"]), statistics.median(p50["pipelined"])
with open(os.path.join(out, "decode-pipelined-metrics.txt")) as f:
    lines += ["", "decode node: " + "; ".join(l.strip() for l in f if l.strip())]
lines += ["", f"median of the runs' TTFT p50: unpipelined {u:.0f} ms, pipelined {p:.0f} ms",
          f"RESULT pipelined_ttft_p50_ms={p:.1f}", f"RESULT unpipelined_ttft_p50_ms={u:.1f}",
          f"RESULT pipelined_ttft_p50_vs_unpipelined={p / u:.3f}",
          # The longest gap between two tokens is the first one (decode call, pull, first step):
          # what pipelining shortens once the first token comes straight from the prefill.
          f"RESULT pipelined_itl_max_vs_unpipelined="
          f"{statistics.median(itl_max['pipelined']) / statistics.median(itl_max['unpipelined']):.3f}"]
text = "\n".join(lines) + "\n"
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write(text)
print(text)
PY
