#!/usr/bin/env bash
# Builds Tandem and runs its test suite (README command two; .ci/run calls exactly this).
#
#   deploy/test.sh                 install missing packages, fetch the model, build, run ctest
#   deploy/test.sh --sanitize      the same in build-asan/ with ASan + UBSan (CUDA off)
#   deploy/test.sh --tsan          ThreadSanitizer in build-tsan/ (CUDA off); runs the engine,
#                                  router, transfer and node tests (labels unit + integration and
#                                  the e2e cluster tests; not the model-quality grids)
#   deploy/test.sh --no-model      skip the real model: `model`-labelled tests are excluded
#   deploy/test.sh -- ARGS...      extra arguments for ctest (e.g. -- -L unit, -- -R planner)
#
# TANDEM_WERROR=ON in the environment makes compiler warnings errors (.ci/run sets it).
#
# Idempotent: re-running reuses the installed packages, the cached model and the build tree.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=0
tsan=0
with_model=1
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize=1 ;;
    --tsan) tsan=1 ;;
    --no-model) with_model=0 ;;
    --) shift; ctest_args=("$@"); break ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ "$sanitize" -eq 1 ] && [ "$tsan" -eq 1 ]; then
  echo "test.sh: --sanitize and --tsan are exclusive (ASan and TSan cannot share a build)" >&2
  exit 2
fi

bash deploy/install-deps.sh
# The `openai` client of the HTTP API tests, in the project-local .venv/ (from PyPI).
bash deploy/python-env.sh >/dev/null

if [ "$with_model" -eq 1 ]; then
  TANDEM_MODEL=$(bash deploy/fetch-model.sh | tail -n 1)
  export TANDEM_MODEL
else
  ctest_args=(-LE model "${ctest_args[@]}")
fi

build=build
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DTANDEM_WERROR=${TANDEM_WERROR:-OFF}")
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
  ctest_args=(-L "unit|integration|e2e" "${ctest_args[@]}")
fi

echo "test.sh: configuring $build/"
cmake -S . -B "$build" "${cmake_args[@]}" >"$build.configure.log" 2>&1 || {
  cat "$build.configure.log"; exit 1; }
echo "test.sh: building (2 jobs)"
cmake --build "$build" -j 2
echo "test.sh: running tests"
ctest --test-dir "$build" -j 2 --output-on-failure --timeout 900 "${ctest_args[@]}"
