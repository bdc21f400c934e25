#!/usr/bin/env bash
# Reproduces the "End to end" record of docs/PERFORMANCE.md with tandem-bench on this machine:
#   (1) Tandem disaggregated (1 prefill + 1 decode instance, 1 thread each) against Tandem
#       colocated (one instance that prefills and decodes, tandem-decode --colocated_prefill=true
#       behind tandem-router --colocated=true, 2 threads: the same total) at the same Poisson
#       request rates: TTFT/TPOT p50/p99 and goodput. Same engine, same model file, so the
#       difference is the serving architecture. llama.cpp's llama-server (2 threads) runs the same
#       rates as an extra row (PART1_LLAMA=0 leaves it out).
#   (2) Tandem vs llama-server, same model file, same load: concurrency 1, 4, 16; 256-token
#       prompts, 128-token outputs (ignore_eos): output tok/s and TTFT/TPOT percentiles.
#       (1) and (2) reach both systems through their OpenAI-compatible HTTP APIs with the same
#       client; Tandem at c=16 is also measured through its gRPC API.
#   (3) Router overhead per streamed token: the same requests through the router and directly to
#       the same prefill + decode nodes (tandem-bench --backend=direct), alternated.
#   (4) The prefix-cache hit path: prompts that share a 2,000-token prefix (a system prompt;
#       tandem-bench --shared_prefix_len) plus 64 tokens of their own, one at a time, on the same
#       1 prefill + 1 decode cluster with the prefill prefix cache off and on: TTFT.
# Every RESULT line is a measurement of this run (ratios of two measurements of this run).
#
#   flock /tmp/tandem-build.lock bash bench/serve/run.sh [OUT_DIR]
#
# Environment: TANDEM_MODEL (default ~/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf),
#   TANDEM_BUILD_DIR (default build), BENCH_SCALE (default 1: multiplies request counts and
#   stage durations; 0.5 halves the run), LLAMA_PORT (default 18181), PARTS (default "1 2 3 4":
#   which of the four records to run), CONCURRENCY (default "1 4 16": the concurrencies of (2)),
#   LLAMA_THREADS (default 2: llama-server's -t/-tb; the record's "same total threads" is 2),
#   RATES (default "0.25 0.5 1": the Poisson rates of (1), req/s), PART1_LLAMA (default 1: the
#   llama-server rows of (1)), TANDEM_CPU_ISA (avx2: every Tandem node on its forced AVX2 path —
#   checked in each node's log — and llama-server from the AVX2-only llama.cpp build, so an
#   AVX-512 machine records an AVX2 server's figures; summary.md names the path).
# The forced-AVX2 end-to-end record (issue 29 item 5; c = 1, 4, 16, every run's prompts new):
#   TANDEM_CPU_ISA=avx2 PARTS=2 bash bench/serve/run.sh /tmp/tandem-e2e-avx2
# llama.cpp's threads spin at its barriers: on a busy machine its figures collapse (tens of times
# slower), so records need an otherwise idle machine.
# Smoke test of the script (minutes, figures meaningless):
#   PARTS=1 PART1_LLAMA=0 RATES="1" BENCH_SCALE=0.25 nice -n 10 bash bench/serve/run.sh /tmp/smoke
# llama-server comes from bench/peer/build_llamacpp.sh (built once into ~/.cache/tandem/llamacpp).
# Output: OUT_DIR (default /tmp/tandem-bench-record) holds one JSON per run, logs, summary.md.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
readonly REPO
model=${TANDEM_MODEL:-$HOME/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf}
build=$(realpath -m "$REPO/${TANDEM_BUILD_DIR:-build}")
scale=${BENCH_SCALE:-1}
llama_port=${LLAMA_PORT:-18181}
parts=" ${PARTS:-1 2 3 4} "
read -r -a conc <<< "${CONCURRENCY:-1 4 16}"
llama_threads=${LLAMA_THREADS:-2}
read -r -a rates <<< "${RATES:-0.25 0.5 1}"
part1_llama=${PART1_LLAMA:-1}
want() { [[ $parts == *" $1 "* ]]; }
# llama-server is needed by (2), and by (1) unless PART1_LLAMA=0.
need_llama() { want 2 || { want 1 && [ "$part1_llama" = 1 ]; }; }
out=$(realpath -m "${1:-/tmp/tandem-bench-record}")
bench="$build/bench/serve/tandem-bench"

log() { echo "run.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }
n() { python3 -c "import sys; print(max(1, round(float(sys.argv[1]) * float(sys.argv[2]))))" "$1" "$scale"; }

[ -f "$model" ] || die "model $model not found (deploy/fetch-model.sh fetches SmolLM2)"
for b in "$bench" "$build/router/tandem-router" "$build/prefill_node/tandem-prefill" \
         "$build/decode_node/tandem-decode"; do
  [ -x "$b" ] || die "$b is missing: build it (tbuild tandem-bench tandem-router tandem-prefill tandem-decode)"
done
if need_llama; then
  llama_bin=$("$REPO/bench/peer/build_llamacpp.sh") || die "bench/peer/build_llamacpp.sh failed"
  [ -x "$llama_bin/llama-server" ] || die "no llama-server in $llama_bin"
fi
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.txt "$out"/summary.md

# ---- Tandem: 1 prefill + 1 decode, one thread each, through deploy/cluster.sh ----------------
conf="$out/disagg.conf"
cat > "$conf" <<CONF
# tandem-bench record: 1 prefill + 1 decode instance, one thread each (2 threads in all).
model=$model
build_dir=$build
name=bench-disagg
startup_timeout_s=300
router   listen=127.0.0.1:0
# The prefix cache (on by default) is off here: every run's prompts are new anyway (a seed per
# run), and (4) compares the cache off and on explicitly.
prefill  tp=1 prefix_cache=false threads_per_rank=1 kv_budget_mb=384 ucx_tls=sm,self
decode   tp=1 threads_per_rank=1 kv_budget_mb=384 ucx_tls=sm,self max_batch=64
CONF
# ---- (4): the same cluster with the prefill prefix cache on ---------------------------------
cache_conf="$out/prefix-cache.conf"
sed -e 's/^name=bench-disagg$/name=bench-prefix-cache/' \
    -e 's/^prefill  tp=1 prefix_cache=false /prefill  tp=1 prefix_cache=true /' "$conf" > "$cache_conf"
grep -q 'prefix_cache=true' "$cache_conf" || die "could not derive $cache_conf from $conf"
# ---- Tandem colocated: one instance, prefill and decode, 2 threads (the same total) -----------
coloc_conf="$out/colocated.conf"
cat > "$coloc_conf" <<CONF
# tandem-bench record: one colocated instance (prefill + decode on the same pools), 2 threads.
model=$model
build_dir=$build
name=bench-colocated
startup_timeout_s=300
router   listen=127.0.0.1:0 colocated=true
decode   tp=1 threads_per_rank=2 kv_budget_mb=768 max_batch=64 colocated_prefill=true
CONF
export TANDEM_RUN_DIR="$out/cluster"
llama_pid=""
cleanup() {
  "$REPO/deploy/cluster.sh" down "$conf" >/dev/null 2>&1 || true
  TANDEM_RUN_DIR="$out/cluster-colocated" "$REPO/deploy/cluster.sh" down "$coloc_conf" >/dev/null 2>&1 || true
  TANDEM_RUN_DIR="$out/cluster-prefix-cache" "$REPO/deploy/cluster.sh" down "$cache_conf" >/dev/null 2>&1 || true
  if [ -n "$llama_pid" ]; then kill "$llama_pid" 2>/dev/null || true; wait "$llama_pid" 2>/dev/null || true; fi
}
trap cleanup EXIT

# check_isa LOG...: each node log's "cpu kernels:" line goes to $out/isa.txt; with TANDEM_CPU_ISA
# set, every node must report that path as forced (a node that ignored the switch would make a
# "forced AVX2" record an AVX-512 one).
check_isa() {
  local f line
  for f in "$@"; do
    line=$(grep -m1 'cpu kernels:' "$f" || true)
    [ -n "$line" ] || die "no 'cpu kernels:' line in $f"
    echo "$line" >> "$out/isa.txt"
    if [ -n "${TANDEM_CPU_ISA:-}" ] && [[ $line != *"cpu kernels: $TANDEM_CPU_ISA"* ]]; then
      die "TANDEM_CPU_ISA=$TANDEM_CPU_ISA but $f says: $line"
    fi
  done
}

start_tandem() {
  log "starting Tandem (1 prefill + 1 decode, 1 thread each)"
  router=$("$REPO/deploy/cluster.sh" up "$conf" | tail -n 1)
  check_isa "$TANDEM_RUN_DIR/prefill-0.log" "$TANDEM_RUN_DIR/decode-0.log"
  prefill_addr="127.0.0.1:$(cat "$TANDEM_RUN_DIR/prefill-0.port")"
  decode_addr="127.0.0.1:$(cat "$TANDEM_RUN_DIR/decode-0.port")"
  log "router $router, prefill $prefill_addr, decode $decode_addr"
}
stop_tandem() { "$REPO/deploy/cluster.sh" down "$conf" >/dev/null; }

start_llama() {
  log "starting llama-server (-t $llama_threads, 16 slots)"
  "$llama_bin/llama-server" -m "$model" -t "$llama_threads" -tb "$llama_threads" -np 16 -c 8192 -cb --host 127.0.0.1 \
    --port "$llama_port" --no-webui > "$out/llama-server.log" 2>&1 &
  llama_pid=$!
  # bench/peer/build_llamacpp.sh builds the TANDEM_CPU_ISA=avx2 llama.cpp (no AVX-512) into its
  # own build-avx2 directory: a forced-AVX2 record must run that one.
  echo "llama-server: $llama_bin/llama-server" >> "$out/isa.txt"
  if [ "${TANDEM_CPU_ISA:-}" = avx2 ] && [[ $llama_bin != */build-avx2/bin ]]; then
    die "TANDEM_CPU_ISA=avx2 but llama-server is not the AVX2-only build: $llama_bin"
  fi
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$llama_port/health" > /dev/null 2>&1 && return 0
    kill -0 "$llama_pid" 2>/dev/null || die "llama-server exited: $(tail -5 "$out/llama-server.log")"
    sleep 0.5
  done
  die "llama-server not healthy after 60 s"
}
stop_llama() { kill "$llama_pid"; wait "$llama_pid" 2>/dev/null || true; llama_pid=""; }

# The machine's load before each run (other work on the box disturbs the figures; this records
# how much there was): load average and the busiest processes (the servers under test included).
note_load() {
  { echo "== $1 $(date -u +%H:%M:%S) loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
    ps -eo pcpu=,comm= --sort=-pcpu | head -4; } >> "$out/load.txt"
}

# run NAME FLAGS...: one tandem-bench run, JSON to $out/NAME.json.
run() {
  local name=$1; shift
  log "run $name"
  note_load "$name"
  # A seed per run name: no run repeats another's prompts, so neither llama-server's prompt cache
  # nor Tandem's prefix cache turns a later run's prefills into cache hits.
  "$bench" --token_id_range=100:10000 --seed="$(cksum <<< "$name" | cut -d' ' -f1)" \
    --request_timeout_s=300 \
    --json_out="$out/$name.json" --result_prefix="${name}_" "$@" > "$out/$name.txt" 2>&1 ||
    { cat "$out/$name.txt" >&2; die "run $name failed"; }
  grep '^RESULT' "$out/$name.txt" || true
}

# SLOs for goodput, sized for a 135M model on 2 CPU cores: first token within 2 s, then at least
# 10 tokens/s per request.
slo=(--slo_ttft_ms=2000 --slo_tpot_ms=100)
rate_load=(--prompt_len=fixed:256 --output_len=fixed:64 --warmup_requests=2 "${slo[@]}")
# --duration_s bounds a closed-loop run on a machine slower than expected (sent is then lower).
cmp_load=(--prompt_len=fixed:256 --output_len=fixed:128 --warmup_requests=2 "${slo[@]}"
          --duration_s="$(n 60)")
requests_at() { n $((2 * $1 > 3 ? 2 * $1 : 3)); }  # 3 at c=1, 8 at c=4, 32 at c=16

llama=(--backend=openai --base_url="http://127.0.0.1:$llama_port" --endpoint=/v1/completions)

start_tandem
# (1) and (2) use Tandem's OpenAI-compatible HTTP API, the API and client code llama-server gets;
# (3) compares the router's gRPC API with direct gRPC calls to the nodes.
tandem=(--backend=openai --base_url="http://127.0.0.1:$(cat "$TANDEM_RUN_DIR/router.http_port")"
        --endpoint=/v1/completions)
grpc=(--backend=grpc --address="$router")
direct=(--backend=direct --prefill="$prefill_addr" --decode="$decode_addr")
# cpu_seconds PID: user + system CPU time the process has used so far (fields 14 and 15 of stat).
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.3f\n", ($12 + $13) / hz }' \
    "/proc/$1/stat"
}
if want 3; then  # (3) router overhead: direct and router runs alternated, same load.
  # Besides the latency pairs (which a busy machine makes noisy), the router's own CPU time during
  # each router run is sampled: CPU seconds per streamed token is a cost load cannot inflate much.
  router_pid=$(read -r pid _ < "$TANDEM_RUN_DIR/router.pid" && echo "$pid")
  for rep in 1 2 3; do
    run "direct_r$rep" "${direct[@]}" "${cmp_load[@]}" --concurrency=4 --num_requests="$(n 4)"
    before=$(cpu_seconds "$router_pid")
    run "router_r$rep" "${grpc[@]}" "${cmp_load[@]}" --concurrency=4 --num_requests="$(n 4)"
    after=$(cpu_seconds "$router_pid")
    python3 -c "print(float('$after') - float('$before'))" > "$out/router_r$rep.cpu_s"
  done
fi
if want 2; then  # (2) Tandem at each concurrency.
  for c in "${conc[@]}"; do
    run "tandem_c$c" "${tandem[@]}" "${cmp_load[@]}" --concurrency="$c" --num_requests="$(requests_at "$c")"
  done
  run "tandem_grpc_c${conc[-1]}" "${grpc[@]}" "${cmp_load[@]}" --concurrency="${conc[-1]}" \
    --num_requests="$(requests_at "${conc[-1]}")"
fi
if want 1; then  # (1) Poisson rates, disaggregated.
  for r in "${rates[@]}"; do
    run "disagg_rate$r" "${tandem[@]}" "${rate_load[@]}" --request_rate="$r" \
      --duration_s="$(n 16)" --num_requests=0
  done
fi
# (4) one request at a time; the warm-up request puts the shared prefix in the cache (when on).
prefix_load=(--shared_prefix_len=2000 --prompt_len=fixed:64 --output_len=fixed:16
             --warmup_requests=1 --concurrency=1 --num_requests="$(n 8)")
if want 4; then  # (4) prefix cache off: this cluster.
  run "prefix_cache_off" "${tandem[@]}" "${prefix_load[@]}"
fi
stop_tandem

if want 4; then  # (4) prefix cache on: the same cluster with --prefix_cache=true.
  export TANDEM_RUN_DIR="$out/cluster-prefix-cache"
  log "starting Tandem 1 prefill (prefix cache on) + 1 decode"
  "$REPO/deploy/cluster.sh" up "$cache_conf" > /dev/null
  cached=(--backend=openai --base_url="http://127.0.0.1:$(cat "$TANDEM_RUN_DIR/router.http_port")"
          --endpoint=/v1/completions)
  # The same seed as the "off" run: the same prompts.
  run "prefix_cache_on" "${cached[@]}" "${prefix_load[@]}" --seed="$(cksum <<< prefix_cache_off | cut -d' ' -f1)"
  "$REPO/deploy/cluster.sh" down "$cache_conf" >/dev/null
  export TANDEM_RUN_DIR="$out/cluster"
fi

if want 1; then  # (1) the same Poisson rates, colocated.
  export TANDEM_RUN_DIR="$out/cluster-colocated"
  log "starting Tandem colocated (one instance, 2 threads)"
  coloc_router=$("$REPO/deploy/cluster.sh" up "$coloc_conf" | tail -n 1)
  log "colocated router $coloc_router"
  colocated=(--backend=openai --base_url="http://127.0.0.1:$(cat "$TANDEM_RUN_DIR/router.http_port")"
             --endpoint=/v1/completions)
  for r in "${rates[@]}"; do
    run "colocated_rate$r" "${colocated[@]}" "${rate_load[@]}" --request_rate="$r" \
      --duration_s="$(n 16)" --num_requests=0
  done
  "$REPO/deploy/cluster.sh" down "$coloc_conf" >/dev/null
  export TANDEM_RUN_DIR="$out/cluster"
fi

if need_llama; then
  start_llama
  if want 2; then
    for c in "${conc[@]}"; do
      run "llamacpp_c$c" "${llama[@]}" "${cmp_load[@]}" --concurrency="$c" --num_requests="$(requests_at "$c")"
    done
  fi
  if want 1 && [ "$part1_llama" = 1 ]; then
    for r in "${rates[@]}"; do
      run "llamacpp_rate$r" "${llama[@]}" "${rate_load[@]}" --request_rate="$r" \
        --duration_s="$(n 16)" --num_requests=0
    done
  fi
  stop_llama
fi

# ---- Summary: tables and the cross-run ratios (each a ratio of two measurements above) -------
bash "$REPO/bench/cpu_info.sh" | tee "$out/cpu.txt"
python3 - "$out" "${rates[*]}" "${conc[*]}" <<'PY'
import json, os, sys
out, rates, concs = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def rep(name):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)["report"]
# The machine, the instruction-set path, and what each server reported using, above the tables.
lines = [open(os.path.join(out, "cpu.txt")).read().strip()]
for extra in ("isa.txt",):
    if os.path.exists(os.path.join(out, extra)):
        lines += ["", "```"] + open(os.path.join(out, extra)).read().rstrip("\n").splitlines() + ["```"]
lines.append("")
def row(label, name):
    r = rep(name)
    if r is None:
        return
    lines.append(
        f"| {label} | {r['requests_ok']}/{r['requests_sent']} | {r['request_throughput_rps']:.2f} | "
        f"{r['output_tokens_per_s']:.1f} | {r['ttft']['p50_ms']:.0f} | {r['ttft']['p99_ms']:.0f} | "
        f"{r['tpot']['p50_ms']:.1f} | {r['tpot']['p99_ms']:.1f} | {r['goodput_rps']:.3f} "
        f"({100 * r['good_fraction']:.0f}%) |")
head = ("| run | ok/sent | req/s | out tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | "
        "TPOT p99 ms | goodput req/s (met) |\n|---|---|---|---|---|---|---|---|---|")
if any(rep(f"{k}_rate{r}") for k in ("disagg", "colocated", "llamacpp") for r in rates):
    lines += ["### (1) Tandem disaggregated (1P+1D, 1 thread each) vs Tandem colocated (1 instance, "
              "2 threads), Poisson arrivals, HTTP (llama-server, 2 threads, as an extra row)", head]
results = []
for r in rates:
    row(f"Tandem 1P+1D, {r} req/s", f"disagg_rate{r}")
    row(f"Tandem colocated, {r} req/s", f"colocated_rate{r}")
    row(f"llama-server, {r} req/s", f"llamacpp_rate{r}")
    d, c = rep(f"disagg_rate{r}"), rep(f"colocated_rate{r}")
    if d and c:
        results.append(f"RESULT disagg_minus_colocated_goodput_rps_rate{r}="
                       f"{d['goodput_rps'] - c['goodput_rps']:.4g}")
        if c["ttft"]["p99_ms"] > 0:
            results.append(f"RESULT disagg_vs_colocated_ttft_p99_rate{r}="
                           f"{d['ttft']['p99_ms'] / c['ttft']['p99_ms']:.4g}")
        if c["tpot"]["p99_ms"] > 0:
            results.append(f"RESULT disagg_vs_colocated_tpot_p99_rate{r}="
                           f"{d['tpot']['p99_ms'] / c['tpot']['p99_ms']:.4g}")
if any(rep(f"{k}_c{c}") for k in ("tandem", "llamacpp") for c in concs):
    lines += ["", "### (2) Tandem vs llama-server, 256-token prompts, 128-token outputs (HTTP)", head]
for c in concs:
    row(f"Tandem c={c}", f"tandem_c{c}")
    row(f"llama-server c={c}", f"llamacpp_c{c}")
row(f"Tandem c={concs[-1]} over gRPC", f"tandem_grpc_c{concs[-1]}")
top = concs[-1]
for c in concs:  # every concurrency's ratio (issue 29 item 5 records c = 1, 4 and 16)
    if rep(f"llamacpp_c{c}") and rep(f"tandem_c{c}"):
        results.append(f"RESULT tandem_vs_llamacpp_tokens_per_s_c{c}="
                       f"{rep(f'tandem_c{c}')['output_tokens_per_s'] / rep(f'llamacpp_c{c}')['output_tokens_per_s']:.4g}")
if rep(f"llamacpp_c{top}") and rep(f"tandem_c{top}"):
    llama = rep(f"llamacpp_c{top}")["output_tokens_per_s"]
    if rep(f"tandem_grpc_c{top}"):
        results.append(f"RESULT tandem_grpc_vs_llamacpp_tokens_per_s_c{top}="
                       f"{rep(f'tandem_grpc_c{top}')['output_tokens_per_s'] / llama:.4g}")
if rep("direct_r1"):
    lines += ["", "### (3) Router overhead per streamed token (c=4, alternated)",
              "| run | TPOT mean ms | TPOT p50 ms | ITL p50 ms | TTFT p50 ms |", "|---|---|---|---|---|"]
    over, cpu_share = [], []
    k = 1
    while rep(f"direct_r{k}") and rep(f"router_r{k}"):
        d, r = rep(f"direct_r{k}"), rep(f"router_r{k}")
        for label, x in ((f"direct #{k}", d), (f"router #{k}", r)):
            lines.append(f"| {label} | {x['tpot']['mean_ms']:.2f} | {x['tpot']['p50_ms']:.2f} | "
                         f"{x['itl']['p50_ms']:.2f} | {x['ttft']['p50_ms']:.0f} |")
        over.append((r["tpot"]["mean_ms"] - d["tpot"]["mean_ms"]) / d["tpot"]["mean_ms"])
        cpu_path = os.path.join(out, f"router_r{k}.cpu_s")
        if os.path.exists(cpu_path) and r["output_tokens"] > 0:
            per_token_ms = 1000 * float(open(cpu_path).read()) / r["output_tokens"]
            cpu_share.append(per_token_ms / r["tpot"]["mean_ms"])
            lines.append(f"| router #{k}: router CPU per streamed token | {per_token_ms:.3f} ms "
                         f"= {cpu_share[-1]:.4f} of its TPOT | | | |")
        k += 1
    over.sort()
    lines += ["", "router overhead per pair (router TPOT mean - direct) / direct: "
              + ", ".join(f"{o:+.4f}" for o in over) + " (the median is reported)"]
    results.append(f"RESULT router_overhead_tpot_fraction={over[len(over) // 2]:.4g}")
    if cpu_share:
        results.append("RESULT router_cpu_per_token_fraction_of_tpot="
                       f"{sum(cpu_share) / len(cpu_share):.4g}")
if rep("prefix_cache_off") and rep("prefix_cache_on"):
    lines += ["", "### (4) Prefix cache: 2,000-token shared prefix + 64 own tokens, 16-token outputs, "
              "one at a time (HTTP)", head]
    row("Tandem 1P+1D, prefix cache off", "prefix_cache_off")
    row("Tandem 1P+1D, prefix cache on", "prefix_cache_on")
    off, on = rep("prefix_cache_off"), rep("prefix_cache_on")
    if off["ttft"]["p50_ms"] > 0:
        results.append(f"RESULT prefix_cache_ttft_p50_on_vs_off="
                       f"{on['ttft']['p50_ms'] / off['ttft']['p50_ms']:.4g}")
lines += [""] + results
lines += ["", "Machine load before each run (load average; busiest processes):", "```"]
lines += open(os.path.join(out, "load.txt")).read().rstrip("\n").splitlines()
lines += ["```"]
text = "\n".join(lines) + "\n"
open(os.path.join(out, "summary.md"), "w").write(text)
print(text)
PY
