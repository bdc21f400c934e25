#!/usr/bin/env bash
# Fuzzes one libFuzzer target for a fixed time from its checked-in seed corpus.
#
#   run_fuzzer.sh FUZZER SEED_DIR SECONDS ARTIFACT_DIR [LIBFUZZER_ARGS...]
#
# New inputs go to a temporary corpus (the checked-in seeds are never modified). A crash, leak,
# timeout, out-of-memory or sanitizer report fails the run: the report is in the output, and so
# is every input libFuzzer saved (path, size and base64), also kept under ARTIFACT_DIR. On
# success the last line sums the run up: executions, coverage (cov / ft of libFuzzer's final
# status line), corpus size.
set -uo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
fuzzer=$1 seeds=$2 seconds=$3 artifacts=$4
shift 4
name=$(basename "$fuzzer")
if ! compgen -G "$seeds/*" >/dev/null; then
  echo "run_fuzzer: $name: seed corpus $seeds is empty or missing" >&2
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/tandem-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$artifacts"
rm -f "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-* \
  "$artifacts"/slow-unit-*
log="$work/log"

# One thread per OpenMP region (dequantisation): a fuzz run is single-process, single-core.
export OMP_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p "$work/corpus"
"$fuzzer" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$@" "$work/corpus" "$seeds" >"$log" 2>&1
rc=$?
# The progress lines (NEW/REDUCE/pulse/RELOAD, hundreds of them) are left out, so a failure's
# report — at the end of libFuzzer's output — is not buried where a CI excerpt cuts.
grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|RELOAD)|^[[:space:]]+NEW_FUNC' "$log" | tail -n 200

found=0
for f in "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-*; do
  [ -f "$f" ] || continue
  found=1
  echo "run_fuzzer: $name: saved input $f ($(stat -c %s "$f") bytes), base64:"
  head -c 65536 "$f" | base64 -w 0
  echo
done
if [ "$rc" -ne 0 ] || [ "$found" -eq 1 ]; then
  echo "run_fuzzer: $name: FAILED (exit $rc); reproduce with: $fuzzer <saved input>" >&2
  exit 1
fi
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
final=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -n 1)
cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$final")
ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$final")
units=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$final")
echo "run_fuzzer: $name: ok, ${seconds} s, executions=${execs:-?} cov=${cov:-?} ft=${ft:-?}" \
  "corpus=${units:-?} crashes=0"
