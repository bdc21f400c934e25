#!/usr/bin/env bash
# GPU check: on a machine with an NVIDIA GPU, build the CUDA backend, run the `cuda` tests
# (kernels, NCCL, GPU generation, and gpu_cluster_e2e_test: GPU prefill → GPU decode nodes with
# device KV pools staged through host mirrors), the decode attention benchmark and (when the CLI
# supports --backend and the model is cached) a single-GPU generate of the real model, then print
# a summary ending with
#   RESULT gpu_decode_attention_bw_ratio=<x>
# (FlashInfer's decode attention KV bytes/s ÷ the read bandwidth measured in the same run; nan if
# unmeasured, e.g. FlashInfer not built), preceded by the benchmark's other RESULT lines (per_head,
# gqa_split_kv and more FlashInfer ratios, see gpu_attention_bench.cu).
# Everything runs within TANDEM_GPU_BUDGET_S seconds (default 480). Safe to run repeatedly: the
# build directory is reused incrementally, nothing is deleted, logs go to <build>/gpu-check/.
#
#   env TANDEM_GPU_BUILD    build directory (default build-gpu)
#   env TANDEM_MODEL        model file for the generate step (default: deploy/fetch-model.sh's
#                           cache; never downloaded here)
#   env TANDEM_FLASHINFER_DIR  FlashInfer headers (deploy/fetch-flashinfer.sh's directory; default:
#                           build-flashinfer/0.7.4 when present — a copy carried to a machine
#                           without network, docs/gpu.md#flashinfer — else CMake's default)
# Exit status: 0 when the build, the tests and the benchmark succeeded, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

start=$(date +%s)
budget=${TANDEM_GPU_BUDGET_S:-480}
build=${TANDEM_GPU_BUILD:-build-gpu}
logs=$build/gpu-check
ratio=nan
results=()
status=0
summary=()

left() { echo $((budget - ($(date +%s) - start))); }
note() {
  summary+=("$1")
  echo "run.sh: $1"
}
finish() {
  echo
  echo "==== GPU check summary ($(($(date +%s) - start)) s) ===="
  printf '  %s\n' "${summary[@]}"
  [ "${#results[@]}" -eq 0 ] || printf '%s\n' "${results[@]}"
  echo "RESULT gpu_decode_attention_bw_ratio=${ratio}"
  exit "$1"
}

# ---- the GPU ----
if ! command -v nvidia-smi >/dev/null 2>&1; then
  note "no GPU: nvidia-smi is not installed"
  finish 1
fi
if ! gpu=$(nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader 2>&1); then
  note "no GPU: nvidia-smi failed: $gpu"
  finish 1
fi
note "gpu: $(echo "$gpu" | head -n 1) ($(echo "$gpu" | wc -l) device(s))"
if echo "$gpu" | head -n 1 | grep -qE 'H100|H200|H800|GH200'; then
  arch=90  # one architecture: half the CUDA compile time
else
  arch=$(echo "$gpu" | head -n 1 | cut -d, -f2 | tr -d ' .')
  [ -n "$arch" ] || arch="80;90"
fi

# ---- configure and build only what the check needs ----
mkdir -p "$logs"
# RelWithDebInfo, the build type CI and the development machines use: Release (-O3) trips GCC 12's
# -Wrestrict false positive in tests/model/format on Debian 12 (issue 14). Device code is
# optimised by ptxas (-O3) either way.
fi_dir=${TANDEM_FLASHINFER_DIR:-}
[ -n "$fi_dir" ] || [ ! -d build-flashinfer/0.7.4 ] || fi_dir=$PWD/build-flashinfer/0.7.4
if ! cmake -S . -B "$build" -G Ninja -DTANDEM_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CUDA_ARCHITECTURES=$arch" ${fi_dir:+"-DTANDEM_FLASHINFER_DIR=$fi_dir"} \
  >"$logs/configure.log" 2>&1; then
  tail -n 30 "$logs/configure.log"
  note "configure FAILED (see $logs/configure.log)"
  finish 1
fi
note "$(grep -m1 -o 'FlashInfer: .*' "$logs/configure.log" || echo 'FlashInfer: (no configure line)')"
mapfile -t tests < <(ctest --test-dir "$build" -L cuda -N | sed -n 's/^ *Test *#[0-9]*: *//p')
targets=("${tests[@]}" gpu_attention_bench)
have_generate=0
# (grep -c reads everything: with pipefail, grep -q would SIGPIPE ninja and fail the test.)
if [ "$(ninja -C "$build" -t targets all 2>/dev/null | grep -c '^tandem-generate:')" -gt 0 ]; then
  targets+=(tandem-generate)
  have_generate=1
fi
echo "run.sh: building ${#targets[@]} targets for sm_$arch with $(nproc) jobs"
if ! timeout "$(left)" ninja -C "$build" -j"$(nproc)" "${targets[@]}" >"$logs/build.log" 2>&1; then
  grep -E 'error|FAILED' "$logs/build.log" | head -n 30
  note "build FAILED or ran out of time (see $logs/build.log)"
  finish 1
fi
note "build: ok (${#targets[@]} targets, $(($(date +%s) - start)) s so far)"

# ---- benchmark (first: it produces the RESULT line) ----
if timeout 120 "$build/bench/gpu/gpu_attention_bench" 2>&1 | tee "$logs/bench.log"; then
  ratio=$(sed -n 's/^RESULT gpu_decode_attention_bw_ratio=//p' "$logs/bench.log")
  [ -n "$ratio" ] || ratio=nan
  mapfile -t results < <(grep -E '^RESULT ' "$logs/bench.log" | grep -v '^RESULT gpu_decode_attention_bw_ratio=')
  while IFS= read -r line; do note "bench: $line"; done < <(grep -E '^(memory|decode)' "$logs/bench.log")
else
  note "bench FAILED (see $logs/bench.log)"
  status=1
fi

# ---- the PyTorch SDPA reference, where torch is installed ----
if python3 -c 'import torch' >/dev/null 2>&1; then
  if timeout 120 python3 bench/gpu/sdpa_bench.py >"$logs/sdpa.log" 2>&1; then
    while IFS= read -r line; do note "sdpa: $line"; done < <(grep -E '^(torch|sdpa)' "$logs/sdpa.log")
    mapfile -t -O "${#results[@]}" results < <(grep -E '^RESULT ' "$logs/sdpa.log")
  else
    note "sdpa: FAILED (see $logs/sdpa.log)"
  fi
else
  note "sdpa: skipped (python3 cannot import torch)"
fi

# ---- the cuda tests (leave ~90 s for the generate step) ----
ctest_budget=$(($(left) - 90))
if [ "$ctest_budget" -lt 60 ]; then ctest_budget=60; fi
# -V keeps every test's output in the log, so gtest's skips (and why) can be reported.
if timeout "$ctest_budget" ctest --test-dir "$build" -L cuda -V --timeout 300 \
  >"$logs/ctest.log" 2>&1; then
  note "tests: $(grep -E 'tests passed' "$logs/ctest.log")"
else
  grep -E '(Failed|\*\*\*|Timeout|Not Run)' "$logs/ctest.log" | head -n 20
  note "tests FAILED: $(grep -E 'tests passed' "$logs/ctest.log" || echo 'ctest ran out of time') (see $logs/ctest.log)"
  status=1
fi
ran=$(grep -cE '^[0-9]+: \[       OK \] .* \([0-9]+ ms\)$' "$logs/ctest.log")
skipped=$(grep -cE '^[0-9]+: \[  SKIPPED \] .* \([0-9]+ ms\)$' "$logs/ctest.log")
note "tests: $ran gtest cases passed, $skipped skipped"
# The distinct skip reasons (the line after gtest's "Skipped" marker).
while IFS= read -r reason; do note "tests: skipped because: $reason"; done < <(
  grep -A1 -E '^[0-9]+: .*: Skipped$' "$logs/ctest.log" | grep -vE 'Skipped$|^--$' |
    sed 's/^[0-9]*: //' | sort | uniq -c | sed 's/^ *//')

# ---- single-GPU generate of the real model ----
model=${TANDEM_MODEL:-${TANDEM_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem/models}/SmolLM2-135M-Instruct.Q4_1.gguf}
generate=$(find "$build" -name tandem-generate -type f -perm -u+x 2>/dev/null | head -n 1)
if [ "$have_generate" -eq 0 ] || [ -z "$generate" ]; then
  note "generate: skipped (no tandem-generate target in this tree)"
elif ! { "$generate" --helpfull 2>&1 || true; } | grep -q -- '-backend'; then
  note "generate: skipped (tandem-generate has no --backend flag)"
elif [ ! -f "$model" ]; then
  note "generate: skipped (model not found at $model; set TANDEM_MODEL)"
elif [ "$(left)" -lt 20 ]; then
  note "generate: skipped (out of time)"
else
  ok_cuda=0
  ok_cpu=0
  for backend in cuda cpu; do
    t=$(($(left) - 5))
    [ "$t" -ge 10 ] || break
    if timeout "$t" "$generate" --model "$model" --backend "$backend" --max_tokens 32 \
      --prompt "The capital of France is" >"$logs/generate_$backend.txt" \
      2>"$logs/generate_$backend.err"; then
      note "generate ($backend): $(tr '\n' ' ' <"$logs/generate_$backend.txt" | cut -c1-160)"
      note "generate ($backend): $(tail -n 1 "$logs/generate_$backend.err")"
      if [ "$backend" = cuda ]; then ok_cuda=1; else ok_cpu=1; fi
    else
      note "generate ($backend) FAILED: $(tail -n 3 "$logs/generate_$backend.err" | tr '\n' ' ')"
      [ "$backend" = cuda ] && status=1
    fi
  done
  if [ "$ok_cuda" -eq 1 ] && [ "$ok_cpu" -eq 1 ]; then
    if cmp -s "$logs/generate_cuda.txt" "$logs/generate_cpu.txt"; then
      note "generate: cuda and cpu greedy outputs are identical"
    else
      note "generate: cuda and cpu outputs differ (bf16 GEMMs vs f32 can diverge at near-ties)"
    fi
  fi
fi

finish "$status"
