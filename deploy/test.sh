#!/usr/bin/env bash
# Builds Tandem and runs its test suite (README command two; .ci/run calls exactly this).
#
#   deploy/test.sh                 install missing packages, fetch the model, build, run ctest
#   deploy/test.sh --sanitize      the same in build-asan/ with ASan + UBSan (CUDA off)
#   deploy/test.sh --tsan          ThreadSanitizer in build-tsan/ (CUDA off); runs the engine,
#                                  router, transfer, node, client and proto tests (list below)
#   deploy/test.sh --no-model      skip the real model: `model`-labelled tests are excluded
#   deploy/test.sh --no-fuzz       skip the fuzz step (below)
#   deploy/test.sh --fuzz-only     only the fuzz step
#   deploy/test.sh -- ARGS...      extra arguments for ctest (e.g. -- -L unit, -- -R planner);
#                                  the fuzz step is then skipped
#
# The fuzz step (default mode, after the suite): the libFuzzer targets of tests/fuzz/ are built
# with clang-14 in build-fuzz/ (ASan + UBSan) and each fuzzes for TANDEM_FUZZ_SECONDS (30) from
# its seed corpus (ctest label `fuzz`); skipped, saying so, when clang-14's libFuzzer is missing.
# TANDEM_WERROR=ON in the environment makes compiler warnings errors (.ci/run sets it).
#
# Idempotent: re-running reuses the installed packages, the cached model and the build tree.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=0
tsan=0
with_model=1
fuzz=1
fuzz_only=0
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize=1 ;;
    --tsan) tsan=1 ;;
    --no-model) with_model=0 ;;
    --no-fuzz) fuzz=0 ;;
    --fuzz-only) fuzz_only=1 ;;
    --) shift; ctest_args=("$@"); fuzz=0; break ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ "$sanitize" -eq 1 ] && [ "$tsan" -eq 1 ]; then
  echo "test.sh: --sanitize and --tsan are exclusive (ASan and TSan cannot share a build)" >&2
  exit 2
fi

if [ "$fuzz_only" -eq 1 ] && { [ "$sanitize" -eq 1 ] || [ "$tsan" -eq 1 ] || [ "$fuzz" -eq 0 ]; }; then
  echo "test.sh: --fuzz-only excludes --sanitize, --tsan, --no-fuzz and ctest arguments" >&2
  exit 2
fi
if [ "$sanitize" -eq 1 ] || [ "$tsan" -eq 1 ]; then fuzz=0; fi

# The fuzz step: libFuzzer targets in a clang build directory, each fuzzing from its seeds.
run_fuzz() {
  local fuzz_build=build-fuzz
  if ! command -v clang++-14 >/dev/null ||
     ! compgen -G "/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null; then
    echo "test.sh: fuzz step SKIPPED: clang++-14 with libFuzzer (Debian clang-14," \
         "libclang-rt-14-dev) is not installed"
    return 0
  fi
  echo "test.sh: configuring $fuzz_build/ (clang-14, libFuzzer + ASan + UBSan)"
  # -O1, as libFuzzer's documentation builds its targets: ~20% quicker to compile than Release's
  # -O3 under ASan, and the targets fuzz from their seeds for a fixed time either way.
  cmake -S . -B "$fuzz_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 -DTANDEM_FUZZ=ON -DTANDEM_CUDA=OFF \
    "-DTANDEM_FUZZ_SECONDS=${TANDEM_FUZZ_SECONDS:-30}" "-DTANDEM_WERROR=${TANDEM_WERROR:-OFF}" \
    >"$fuzz_build.configure.log" 2>&1 || { cat "$fuzz_build.configure.log"; return 1; }
  echo "test.sh: building the fuzz targets (2 jobs)"
  cmake --build "$fuzz_build" -j 2 --target tandem_fuzzers
  echo "test.sh: fuzzing (label fuzz, ${TANDEM_FUZZ_SECONDS:-30} s per target)"
  local rc=0
  ctest --test-dir "$fuzz_build" -j 2 -L fuzz --output-on-failure || rc=$?
  if [ "$rc" -ne 0 ]; then
    # Repeated last, so the end of a long log (what CI excerpts keep) holds what reproduces it.
    echo "test.sh: fuzzing FAILED; saved inputs (reproduce: $fuzz_build/tests/fuzz/fuzz_<target> FILE):"
    local f
    for f in "$fuzz_build"/fuzz-artifacts/*/crash-* "$fuzz_build"/fuzz-artifacts/*/leak-* \
      "$fuzz_build"/fuzz-artifacts/*/timeout-* "$fuzz_build"/fuzz-artifacts/*/oom-*; do
      [ -f "$f" ] || continue
      echo "test.sh: $f ($(stat -c %s "$f") bytes) base64: $(head -c 16384 "$f" | base64 -w 0)"
    done
    grep -h -E '^(SUMMARY|==[0-9]+==ERROR)|runtime error|fuzz invariant failed|out-of-memory|deadly signal' \
      "$fuzz_build"/Testing/Temporary/LastTest.log 2>/dev/null | head -n 20 || true
  fi
  return "$rc"
}

bash deploy/install-deps.sh
if [ "$fuzz_only" -eq 1 ]; then
  run_fuzz
  exit $?
fi
# The `openai` client of the HTTP API tests, in the project-local .venv/ (from PyPI).
bash deploy/python-env.sh >/dev/null

if [ "$with_model" -eq 1 ]; then
  TANDEM_MODEL=$(bash deploy/fetch-model.sh | tail -n 1)
  export TANDEM_MODEL
else
  ctest_args=(-LE model "${ctest_args[@]}")
fi
# llama.cpp's reference vocabularies and chat templates (tokenizer and template oracles).
TANDEM_LLAMACPP_DATA=$(bash deploy/fetch-llamacpp-data.sh | tail -n 1)
export TANDEM_LLAMACPP_DATA

build=build
# Line tables (-g1) instead of full debug info: a failing test's backtrace still names file and
# line, and the C++ compiles ~30% faster and links faster (CI's time bound; measured per object).
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DTANDEM_WERROR=${TANDEM_WERROR:-OFF}"
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
if [ "$sanitize" -eq 1 ]; then
  build=build-asan
  cmake_args+=(-DTANDEM_SANITIZE=ON -DTANDEM_CUDA=OFF)
  # UCX's malloc/mmap hooks fight ASan's interceptors; Tandem does not need them (pools are
  # allocated through UCX itself).
  export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
fi

if [ "$tsan" -eq 1 ]; then
  build=build-tsan
  cmake_args+=(-DTANDEM_TSAN=ON -DTANDEM_CUDA=OFF)
  export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
  # Races inside uninstrumented third-party libraries are suppressed (each entry says why);
  # a report in Tandem code fails the test.
  export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/deploy/tsan.supp}"
  # Debian's libgomp is not TSan-instrumented (its barriers are invisible): OpenMP regions run on
  # one thread here. Tandem's own threads (ranks, progress, gRPC, pulls) still run concurrently.
  export OMP_NUM_THREADS=1
  # Covered: the engine (communicator, forward, engines, block manager, instances whose test
  # backends are built on every rank thread at once), the KV transfer (planner,
  # UCX transfer and faults, fake transport), the nodes (prefill/decode node tests, leases, their
  # gRPC services and call threads), the router (pool, state machine, driver, node client,
  # integration with fake nodes, HTTP), the HTTP server's event loop, the cancellation token and
  # the loop pool, and client, the proto conversions. Not covered: model/tokenizer tests
  # (single-threaded, and protobuf's inline Map code crashes under TSan against Debian's
  # uninstrumented libprotobuf in router_served_model_test), the e2e process clusters (too slow
  # under TSan on 2 cores), cuda.
  tsan_tests='^(cpu_communicator_test|block_manager_test|forward_test|engines_test|kv_.*'
  tsan_tests+='|multi_rank_paths_test|padded_rows_test|add_rms_norm_forward_test'
  tsan_tests+='|decode_node_test|decode_lease_keeper_test|prefill_lease_table_test|prefill_node_test'
  tsan_tests+='|decode_service_test|prefill_service_test|serving_call_threads_test'
  tsan_tests+='|router_node_policy_test|router_request_validation_test|router_request_state_test'
  tsan_tests+='|router_retry_policy_test|router_node_pool_test|router_integration_test'
  tsan_tests+='|router_http_core_test|router_http_integration_test|client_.*|proto_.*'
  tsan_tests+='|router_generate_driver_test|router_grpc_node_client_test|router_grpc_read_stream_test'
  tsan_tests+='|router_kv_releaser_test|router_kv_routing_test|router_prefill_cancel_race_test'
  tsan_tests+='|router_prefix_match_test|router_provenance_test|router_http_tools_template_test'
  tsan_tests+='|serving_http_server_test|serving_http_wire_test'
  tsan_tests+='|cancellation_test|parallel_for_test|common_request_checks_test)$'
  # kv_.* names the KV transfer's tests; kv_routing_e2e_test, an in-process cluster, is an e2e
  # test like the others left out above.
  ctest_args=(-R "$tsan_tests" -E '_e2e_test$' "${ctest_args[@]}")
fi

# FlashInfer's headers for the CUDA build's FlashInfer attention path (docs/gpu.md#flashinfer),
# only where nvcc is installed and the build has CUDA.
if [ "$sanitize" -eq 0 ] && [ "$tsan" -eq 0 ] &&
  { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  cmake_args+=("-DTANDEM_FLASHINFER_DIR=$(bash deploy/fetch-flashinfer.sh | tail -n 1)")
fi

echo "test.sh: configuring $build/"
cmake -S . -B "$build" "${cmake_args[@]}" >"$build.configure.log" 2>&1 || {
  cat "$build.configure.log"; exit 1; }
echo "test.sh: building (2 jobs)"
cmake --build "$build" -j 2
echo "test.sh: running tests"
ctest --test-dir "$build" -j 2 --output-on-failure --timeout 900 "${ctest_args[@]}"
if [ "$fuzz" -eq 1 ]; then
  run_fuzz
fi
