#!/usr/bin/env bash
# Tandem's CPU backend against llama.cpp on the same model file, machine and thread count, in one
# sitting: llama-bench (pp512, tg128), llama-batched-bench (S_TG at npl=16) and Tandem's
# model_bench (prefill 512, decode batch 1 and 16), alternated for ROUNDS rounds so both programs
# share the machine's noise; each figure is the best of its rounds. Prints the table and
#   RESULT cpu_decode_b1_vs_llamacpp=<Tandem decode b1 tok/s ÷ llama.cpp tg128 tok/s>
#   RESULT cpu_prefill_vs_llamacpp=<Tandem prefill 512 tok/s ÷ llama.cpp pp512 tok/s>
#   RESULT cpu_decode_b16_vs_llamacpp=<Tandem decode b16 tok/s ÷ llama-batched-bench S_TG>
#   RESULT cpu_prefill_fma_bound_vs_llamacpp=<the prefill ratio Tandem would have if its linear
#     layers ran at the f32 FMA peak model_bench measures in the same rounds, all else free: the
#     ceiling of exact prefill (f32 FMAs on dequantised weights) against this llama.cpp>
#
#   flock /tmp/tandem-build.lock bash bench/peer/llamacpp.sh     # keeps builds off the cores
#   env TANDEM_MODEL   model file (default ~/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf)
#   env THREADS        threads for both programs (default 2)
#   env ROUNDS         alternation rounds (default 2)
#   env TANDEM_BUILD   Tandem build directory with bench/model/model_bench (default build)
#   env TANDEM_CPU_ISA=avx2  both programs on AVX2 only (Tandem's forced path; llama.cpp built
#                      without AVX-512): the figures of an AVX2 server, labelled FORCED
# The output names the CPU and the instruction-set path (bench/cpu_info.sh) above the table.
# llama.cpp is built once by bench/peer/build_llamacpp.sh (cache outside the tree).
set -euo pipefail
cd "$(dirname "$0")/../.."

model="${TANDEM_MODEL:-$HOME/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
threads="${THREADS:-2}"
rounds="${ROUNDS:-2}"
build="${TANDEM_BUILD:-build}"
model_bench="$build/bench/model/model_bench"
[[ -f "$model" ]] || { echo "llamacpp.sh: no model at $model" >&2; exit 1; }
[[ -x "$model_bench" ]] || { echo "llamacpp.sh: build model_bench first ($model_bench)" >&2; exit 1; }
bin=$(bash bench/peer/build_llamacpp.sh)

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# Best (largest) value of a JSON-lines field over the lines matching a filter.
best_json() {  # file python-filter field
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
path, flt, field = sys.argv[1:]
best = 0.0
for line in open(path):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if eval(flt, {}, {"r": r}):
        best = max(best, float(r[field]))
print(best)
PY
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds: llama-bench" >&2
  "$bin/llama-bench" -m "$model" -p 512 -n 128 -r 3 -t "$threads" -o jsonl \
    >>"$logs/llama_bench.jsonl" 2>>"$logs/stderr.log"
  echo "round $round/$rounds: model_bench" >&2
  OMP_NUM_THREADS="$threads" "$model_bench" --model "$model" --fraction_lengths= \
    >>"$logs/model_bench.txt" 2>>"$logs/stderr.log"
  echo "round $round/$rounds: llama-batched-bench" >&2
  "$bin/llama-batched-bench" -m "$model" -c 4096 -npp 128 -ntg 128 -npl 16 -t "$threads" \
    --output-format jsonl >>"$logs/batched.jsonl" 2>>"$logs/stderr.log"
done

pp=$(best_json "$logs/llama_bench.jsonl" 'r["n_prompt"] == 512 and r["n_gen"] == 0' avg_ts)
tg=$(best_json "$logs/llama_bench.jsonl" 'r["n_prompt"] == 0 and r["n_gen"] == 128' avg_ts)
stg=$(best_json "$logs/batched.jsonl" 'r["pl"] == 16' speed_tg)
best_line() {  # the largest value of a model_bench row
  awk -v key="$1" 'index($0, key) == 1 { v = $NF + 0; if (v > best) best = v } END { print best + 0 }' \
    "$logs/model_bench.txt"
}
t_pp=$(best_line "prefill tokens/s")
t_b1=$(best_line "decode batch 1  tokens/s")
t_b16=$(best_line "decode batch 16 tokens/s")
# The prefill rate the machine's f32 FMA peak, measured by model_bench in the same rounds, would
# give the linear layers alone: the most exact prefill (f32 FMAs on dequantised weights) can reach.
t_peak=$(awk -F= '/^RESULT prefill_fma_peak_tok_s=/ { v = $2 + 0; if (v > best) best = v }
  END { print best + 0 }' "$logs/model_bench.txt")

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
resident=$(awk '/resident weights/ { for (i = 1; i <= NF; ++i) if ($i == "MB,") print $(i - 1) }' \
  "$logs/model_bench.txt" | head -1)

python3 - "$pp" "$tg" "$stg" "$t_pp" "$t_b1" "$t_b16" "$threads" "$rounds" "$load_before" \
  "$load_after" "$resident" "$(bash bench/cpu_info.sh)" "$t_peak" <<'PY'
import sys
pp, tg, stg, t_pp, t_b1, t_b16 = map(float, sys.argv[1:7])
t_peak = float(sys.argv[13])
threads, rounds = sys.argv[7], sys.argv[8]
print(sys.argv[12])
print(f"load average before: {sys.argv[9]}, after: {sys.argv[10]}; "
      f"Tandem resident weights: {sys.argv[11]} MB")
def ratio(a, b):
    return a / b if b > 0 else float("nan")
print(f"{threads} threads, best of {rounds} alternated rounds")
print(f"{'':44} {'llama.cpp':>10} {'Tandem':>10} {'ratio':>7}")
rows = [
    ("prefill 512 tok/s (pp512 / model_bench)", pp, t_pp),
    ("decode batch 1 tok/s (tg128 / model_bench)", tg, t_b1),
    ("decode 16 seqs tok/s (batched S_TG / bench)", stg, t_b16),
]
for name, l, t in rows:
    print(f"{name:44} {l:10.1f} {t:10.1f} {ratio(t, l):7.2f}")
print(f"{'prefill bound: linear layers at FMA peak':44} {pp:10.1f} {t_peak:10.1f} "
      f"{ratio(t_peak, pp):7.2f}")
print(f"RESULT cpu_decode_b1_vs_llamacpp={ratio(t_b1, tg):.3f}")
print(f"RESULT cpu_prefill_vs_llamacpp={ratio(t_pp, pp):.3f}")
print(f"RESULT cpu_decode_b16_vs_llamacpp={ratio(t_b16, stg):.3f}")
print(f"RESULT cpu_prefill_fma_bound_vs_llamacpp={ratio(t_peak, pp):.3f}")
PY
