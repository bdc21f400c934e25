#!/usr/bin/env bash
# The GPU check of issue 26 (docs/gpu.md#the-gpu-check): on a machine with an NVIDIA GPU, verify
# and measure the CUDA path in one run of at most TANDEM_GPU_BUDGET_S seconds (default 570, i.e.
# under 10 minutes of an H200 when the build is prebuilt):
#
#   1. benchmarks, each against a limit or a peer measured in this same run:
#      gpu_attention_bench       decode attention KV bytes/s ÷ read bandwidth (FlashInfer, per_head,
#                                gqa_split_kv)                → gpu_decode_attention_bw_ratio
#      sdpa_bench.py             PyTorch SDPA on the same workloads (beside it)
#      transfer_bench --memory cuda   KV pull device→device ÷ cudaMemcpy D2D
#                                                              → gpu_transfer_vs_memcpy
#      gpu_model_bench           synthetic 1.2B Llama (tandem-make-model): batch-1 decode step vs
#                                weight bytes ÷ read bandwidth → gpu_decode_b1_roofline_ratio
#                                (bf16 + graphs; _bf16 and _f32 for the other paths);
#                                prefill of 512 tokens, set beside eager_llama.py (the same shapes
#                                in eager PyTorch)             → gpu_prefill512_vs_torch_eager
#   2. the `cuda` ctest label (kernels, bf16 ops, CUDA graphs, backend, NCCL, GPU generation, and
#      gpu_cluster_e2e_test: GPU prefill → GPU decode nodes), then gpu_cluster_e2e_test once more
#      on the new path (TANDEM_CUDA_ACTIVATIONS=bf16 TANDEM_CUDA_GRAPHS=on);
#   3. compute-sanitizer memcheck on the backend op tests;
#   4. a small synthetic model generated on cpu, cuda (f32 activations), cuda (bf16) and cuda
#      (bf16 + graphs): each must finish; whether the greedy tokens equal the cpu's is reported
#      (bf16 rounding may flip near-ties; token identity is only required of the CPU paths).
#
# Then a summary with every RESULT line side by side, a list of what did not run and why, and
# as its last line (the contract other tools read)
#   RESULT gpu_decode_attention_bw_ratio=<x>
# (nan when unmeasured).
#
#   bench/gpu/run.sh --targets   prints the build targets the check needs (for a prebuilt build)
#   env TANDEM_GPU_BUILD      build directory (default build-gpu)
#   env TANDEM_GPU_PREBUILT   1: use the build directory as it is (a packed build from a
#                             development machine, docs/gpu.md#the-gpu-check); default: configure
#                             and build the targets here (needs nvcc, CMake and the dependencies)
#   env TANDEM_GPU_BUDGET_S   seconds for everything (default 570)
#   env TANDEM_FLASHINFER_DIR FlashInfer headers when building here (deploy/fetch-flashinfer.sh;
#                             default: build-flashinfer/0.7.4 when present, else CMake's default)
#   env TANDEM_UCX_ROOT       a CUDA-aware UCX to build against when building here
#                             (deploy/fetch-ucx-cuda.sh; without it transfer_bench --memory cuda
#                             says the linked UCX has no CUDA and the step fails)
# Logs go to <build>/gpu-check/. Exit status: 0 when the build, the tests, the sanitizer and the
# benchmarks succeeded, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

# The synthetic model of the decode/prefill measurement (docs/gpu.md: 1.2B parameters, the shape
# of the H200 profile of the earlier session), and the small one of the token comparison.
big_model=(--layers 16 --hidden 2048 --q-heads 32 --kv-heads 8 --head-dim 64 --intermediate 8192
  --vocab 32000 --dtype f16)
small_model=(--layers 2 --hidden 256 --q-heads 8 --kv-heads 2 --head-dim 32 --intermediate 512
  --vocab 512 --dtype f32)
sanitized=(cuda_backend_ops_test cuda_bf16_ops_test cuda_graph_test cuda_kv_cache_write_test)
bench_targets=(gpu_attention_bench gpu_model_bench tandem-make-model tandem-generate transfer_bench)

build=${TANDEM_GPU_BUILD:-build-gpu}
if [ "${1:-}" = "--targets" ]; then
  # The cuda tests (and what they start: node binaries) plus the benchmarks.
  echo "${bench_targets[*]} tandem-prefill tandem-decode tandem-router" \
    "$(ctest --test-dir "$build" -L cuda -N 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: *//p' | tr '\n' ' ')"
  exit 0
fi

start=$(date +%s)
budget=${TANDEM_GPU_BUDGET_S:-570}
logs=$build/gpu-check
status=0
summary=()
results=()
not_run=()
attention_ratio=nan

left() { echo $((budget - ($(date +%s) - start))); }
note() {
  summary+=("$1")
  echo "run.sh: $1"
}
skip() {
  not_run+=("$1")
  echo "run.sh: NOT RUN: $1"
}
# cap SECONDS: the smaller of SECONDS and what is left of the budget (at least 1).
cap() {
  local l
  l=$(left)
  [ "$l" -lt "$1" ] && echo $((l > 1 ? l : 1)) || echo "$1"
}
collect() { mapfile -t -O "${#results[@]}" results < <(grep -E '^RESULT ' "$1"); }
finish() {
  echo
  echo "==== GPU check summary ($(($(date +%s) - start)) s of $budget) ===="
  printf '  %s\n' "${summary[@]}"
  if [ "${#not_run[@]}" -gt 0 ]; then
    echo "  did not run:"
    printf '    %s\n' "${not_run[@]}"
  fi
  [ "${#results[@]}" -eq 0 ] || printf '%s\n' "${results[@]}" | grep -v '^RESULT gpu_decode_attention_bw_ratio='
  echo "RESULT gpu_decode_attention_bw_ratio=${attention_ratio}"
  exit "$1"
}

# ---- the GPU ----
if ! command -v nvidia-smi >/dev/null 2>&1; then
  note "no GPU: nvidia-smi is not installed"
  finish 1
fi
if ! gpu=$(nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>&1); then
  note "no GPU: nvidia-smi failed: $gpu"
  finish 1
fi
note "gpu: $(echo "$gpu" | head -n 1) ($(echo "$gpu" | wc -l) device(s))"
mkdir -p "$logs"

# ---- build (unless prebuilt) ----
if [ "${TANDEM_GPU_PREBUILT:-0}" = 1 ]; then
  note "build: prebuilt $build (not rebuilt)"
else
  if echo "$gpu" | head -n 1 | grep -qE 'H100|H200|H800|GH200'; then
    arch=90  # one architecture: half the CUDA compile time
  else
    arch=$(echo "$gpu" | head -n 1 | cut -d, -f2 | tr -d ' .')
    [ -n "$arch" ] || arch="80;90"
  fi
  # RelWithDebInfo, as CI: Release (-O3) trips GCC 12's -Wrestrict false positive in
  # tests/model/format on Debian 12 (issue 14). Device code is optimised by ptxas either way.
  fi_dir=${TANDEM_FLASHINFER_DIR:-}
  [ -n "$fi_dir" ] || [ ! -d build-flashinfer/0.7.4 ] || fi_dir=$PWD/build-flashinfer/0.7.4
  if ! cmake -S . -B "$build" -G Ninja -DTANDEM_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CUDA_ARCHITECTURES=$arch" ${fi_dir:+"-DTANDEM_FLASHINFER_DIR=$fi_dir"} \
    ${TANDEM_UCX_ROOT:+"-DTANDEM_UCX_ROOT=$TANDEM_UCX_ROOT"} >"$logs/configure.log" 2>&1; then
    tail -n 30 "$logs/configure.log"
    note "configure FAILED (see $logs/configure.log)"
    finish 1
  fi
  note "$(grep -m1 -o 'FlashInfer: .*' "$logs/configure.log" || echo 'FlashInfer: (no configure line)')"
  read -r -a targets <<<"$("$0" --targets)"
  echo "run.sh: building ${#targets[@]} targets for sm_$arch with $(nproc) jobs"
  if ! timeout "$(left)" ninja -C "$build" -j"$(nproc)" -k 0 "${targets[@]}" >"$logs/build.log" 2>&1; then
    grep -E 'error|FAILED' "$logs/build.log" | head -n 30
    note "build FAILED or ran out of time (see $logs/build.log); what built still runs"
    status=1
  else
    note "build: ok (${#targets[@]} targets, $(($(date +%s) - start)) s so far)"
  fi
fi
bin() { find "$build" -name "$1" -type f -perm -u+x 2>/dev/null | head -n 1; }

# ---- 1a. decode attention (FlashInfer and Tandem's kernels) vs read bandwidth ----
b=$(bin gpu_attention_bench)
if [ -z "$b" ]; then
  skip "gpu_attention_bench (not built)"
elif timeout "$(cap 120)" "$b" >"$logs/attention.log" 2>&1; then
  attention_ratio=$(sed -n 's/^RESULT gpu_decode_attention_bw_ratio=//p' "$logs/attention.log")
  [ -n "$attention_ratio" ] || attention_ratio=nan
  collect "$logs/attention.log"
  while IFS= read -r line; do note "attention: $line"; done < <(grep -E '^(memory|decode)' "$logs/attention.log")
else
  note "attention bench FAILED (see $logs/attention.log)"
  status=1
fi

# ---- 1b. PyTorch SDPA on the same workloads ----
have_torch=0
python3 -c 'import torch' >/dev/null 2>&1 && have_torch=1
if [ "$have_torch" -eq 0 ]; then
  skip "sdpa_bench.py and eager_llama.py (python3 cannot import torch)"
elif timeout "$(cap 90)" python3 bench/gpu/sdpa_bench.py >"$logs/sdpa.log" 2>&1; then
  while IFS= read -r line; do note "sdpa: $line"; done < <(grep -E '^(torch|sdpa)' "$logs/sdpa.log")
  collect "$logs/sdpa.log"
else
  note "sdpa FAILED (see $logs/sdpa.log)"
fi

# ---- 1c. KV transfer device→device vs cudaMemcpy ----
b=$(bin transfer_bench)
if [ -z "$b" ]; then
  skip "transfer_bench --memory cuda (not built)"
elif ! { "$b" --helpfull 2>&1 || true; } | grep -q -- '--memory'; then
  skip "transfer_bench --memory cuda (this transfer_bench has no --memory flag)"
elif timeout "$(cap 90)" "$b" --memory cuda >"$logs/transfer.log" 2>&1; then
  collect "$logs/transfer.log"
  while IFS= read -r line; do note "transfer: $line"; done < <(grep -E 'memcpy|transport|GB/s' "$logs/transfer.log" | head -n 6)
else
  note "transfer bench FAILED: $(tail -n 1 "$logs/transfer.log" | cut -c1-200) (see $logs/transfer.log)"
  status=1
fi

# ---- 1d. whole model: batch-1 decode vs weight streaming, prefill 512 vs eager PyTorch ----
make_model=$(bin tandem-make-model)
model_bench=$(bin gpu_model_bench)
big=$logs/synthetic-1.2b.gguf
if [ -z "$make_model" ] || [ -z "$model_bench" ]; then
  skip "gpu_model_bench (tandem-make-model or gpu_model_bench not built)"
elif ! { [ -s "$big" ] || timeout "$(cap 90)" "$make_model" --out "$big" "${big_model[@]}" \
  >"$logs/make_model.log" 2>&1; }; then
  note "tandem-make-model FAILED (see $logs/make_model.log)"
  status=1
else
  timeout "$(cap 200)" "$model_bench" --model "$big" --prefill_tokens 512 --decode_tokens 64 \
    >"$logs/model.log" 2>&1 || {
    note "gpu_model_bench FAILED (see $logs/model.log): $(grep -E '^path .* FAILED|^gpu_model_bench:' "$logs/model.log" | tr '\n' ' ' | cut -c1-300)"
    status=1
  }
  collect "$logs/model.log"
  while IFS= read -r line; do note "model: $line"; done < <(grep -E '^(memory|decode_b1|prefill)' "$logs/model.log")
  tandem_ms=$(sed -n 's/^prefill512_ms bf16_graphs //p' "$logs/model.log")
  if [ "$have_torch" -eq 1 ] && [ -n "$tandem_ms" ]; then
    # The eager reference gets the same shapes as big_model.
    if timeout "$(cap 90)" python3 bench/gpu/eager_llama.py --layers 16 --hidden 2048 --q-heads 32 \
      --kv-heads 8 --head-dim 64 --intermediate 8192 --vocab 32000 --tokens 512 \
      >"$logs/eager.log" 2>&1; then
      torch_ms=$(sed -n 's/^prefill512_ms torch_eager //p' "$logs/eager.log")
      note "eager: $(grep -E '^(torch|prefill)' "$logs/eager.log" | tr '\n' ' ')"
      results+=("RESULT gpu_prefill512_vs_torch_eager=$(awk -v t="$torch_ms" -v g="$tandem_ms" \
        'BEGIN { printf "%.4f", t / g }')")
    else
      note "eager_llama.py FAILED (see $logs/eager.log)"
    fi
  fi
fi

# ---- 2. the cuda tests, then the GPU P/D cluster again on bf16 activations ----
# Leave time for the sanitizer (~90 s) and the token comparison (~30 s).
ctest_budget=$(($(left) - 130))
[ "$ctest_budget" -ge 60 ] || ctest_budget=60
# -V keeps every test's output in the log, so gtest's skips (and why) can be reported.
if timeout "$ctest_budget" ctest --test-dir "$build" -L cuda -V --timeout 300 \
  >"$logs/ctest.log" 2>&1; then
  note "tests: $(grep -E '^[0-9]+% tests passed' "$logs/ctest.log")"
else
  grep -E '(Failed|\*\*\*|Timeout|Not Run)' "$logs/ctest.log" | head -n 20
  note "tests FAILED: $(grep -E 'tests passed' "$logs/ctest.log" || echo 'ctest ran out of time') (see $logs/ctest.log)"
  status=1
fi
note "tests: $(grep -cE '^[0-9]+: \[       OK \] ' "$logs/ctest.log") gtest cases passed, $(grep -cE '^[0-9]+: \[  SKIPPED \] ' "$logs/ctest.log") skipped"
while IFS= read -r reason; do note "tests: skipped because: $reason"; done < <(
  grep -A1 -E '^[0-9]+: .*: Skipped$' "$logs/ctest.log" | grep -vE 'Skipped$|^--$' |
    sed 's/^[0-9]*: //' | sort | uniq -c | sed 's/^ *//')
if [ "$(left)" -lt 150 ]; then
  skip "gpu_cluster_e2e_test with bf16 activations and CUDA graphs (out of time)"
elif TANDEM_CUDA_ACTIVATIONS=bf16 TANDEM_CUDA_GRAPHS=on timeout "$(cap 150)" ctest \
  --test-dir "$build" -R '^gpu_cluster_e2e_test$' -V --timeout 140 >"$logs/cluster_bf16.log" 2>&1; then
  note "cluster (bf16 activations + graphs): $(grep -E '^[0-9]+% tests passed' "$logs/cluster_bf16.log"), $(grep -cE '^[0-9]+: \[  SKIPPED \] ' "$logs/cluster_bf16.log") cases skipped"
else
  note "cluster (bf16 activations + graphs) FAILED (see $logs/cluster_bf16.log)"
  status=1
fi

# ---- 3. compute-sanitizer memcheck on the backend's op tests ----
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ ! -x "$sanitizer" ]; then
  skip "compute-sanitizer (not installed)"
else
  for t in "${sanitized[@]}"; do
    tb=$(bin "$t")
    if [ -z "$tb" ]; then
      skip "memcheck $t (not built)"
    elif [ "$(left)" -lt 20 ]; then
      skip "memcheck $t (out of time)"
    elif timeout "$(cap 60)" "$sanitizer" --tool memcheck --error-exitcode 99 "$tb" \
      >"$logs/memcheck_$t.log" 2>&1; then
      note "memcheck $t: $(grep -m1 -E 'ERROR SUMMARY' "$logs/memcheck_$t.log")"
    else
      note "memcheck $t FAILED: $(grep -m1 -E 'ERROR SUMMARY|FAILED' "$logs/memcheck_$t.log") (see $logs/memcheck_$t.log)"
      status=1
    fi
  done
fi

# ---- 4. tokens of a small synthetic model: cpu, cuda f32 activations, cuda bf16 ----
generate=$(bin tandem-generate)
small=$logs/synthetic-small.gguf
if [ -z "$generate" ] || [ -z "$make_model" ]; then
  skip "token comparison (tandem-generate or tandem-make-model not built)"
elif [ "$(left)" -lt 20 ]; then
  skip "token comparison (out of time)"
elif timeout 30 "$make_model" --out "$small" "${small_model[@]}" >/dev/null 2>&1; then
  ids=3,14,15,92,65,35,89,79,32,38,46,26,43,38,32,79
  ok=()
  for run in cpu:cpu:f32:off cuda:cuda:f32:off cuda_bf16:cuda:bf16:off \
    cuda_bf16_graphs:cuda:bf16:on; do
    IFS=: read -r name backend act graphs <<<"$run"
    if TANDEM_CUDA_ACTIVATIONS=$act TANDEM_CUDA_GRAPHS=$graphs timeout "$(cap 30)" "$generate" \
      --model "$small" --backend "$backend" --prompt_ids "$ids" --max_tokens 24 --ignore_eos \
      >"$logs/tokens_$name.txt" 2>"$logs/tokens_$name.err"; then
      ok+=("$name")
    else
      note "generate $name FAILED: $(tail -n 2 "$logs/tokens_$name.err" | tr '\n' ' ')"
      status=1
    fi
  done
  for name in cuda cuda_bf16 cuda_bf16_graphs; do
    if [[ " ${ok[*]} " != *" cpu "* || " ${ok[*]} " != *" $name "* ]]; then
      continue
    elif cmp -s "$logs/tokens_cpu.txt" "$logs/tokens_$name.txt"; then
      note "tokens: $name greedy tokens equal the cpu's"
    else
      note "tokens: $name differs from cpu (bf16 weights/activations can flip near-ties): $(tr '\n' ' ' <"$logs/tokens_$name.txt" | cut -c1-80)"
    fi
  done
else
  note "tandem-make-model (small) FAILED"
fi

finish "$status"
