#!/usr/bin/env bash
# Soak run (issue 17): a local cluster from deploy/cluster.sh on a synthetic model — two prefill
# nodes (tp=2 and tp=1) and two decode nodes (tp=1) — driven by bench/soak/soak.py at a steady
# concurrency with mixed requests (normal, cancelled part-way, timed out by a deadline over HTTP
# and over gRPC, invalid), every answer checked; every 10 s each process's RSS, open fds and
# threads and the nodes' KV blocks, leases, running and waiting requests are sampled. Fails on a
# wrong answer, a lost request, growth (RSS after warm-up, fds/threads over their idle baseline)
# or anything left behind (KV blocks, leases, running requests) once the load stops.
#
#   bench/soak/run.sh --minutes N | --requests N  [--concurrency C] [--out DIR] [--build DIR]
#
# Output: the driver's log on stdout, the samples (CSV) and a summary (JSON) in --out, with the
# processes' logs in OUT/run/ (without --out: a fresh directory under /tmp, removed after a pass,
# kept and printed after a failure). The cluster is always taken down. Not a speed measurement:
# run it at `nice -n 19` on a shared machine.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TANDEM_BUILD_DIR:-$repo/build}
out=""
driver_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes | --requests | --concurrency | --sample_s | --warmup_s | --timeout_ms)
      [[ $# -ge 2 ]] || { echo "run.sh: $1 needs a value" >&2; exit 2; }
      driver_args+=("$1=$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
python=${TANDEM_VENV:-$repo/.venv}/bin/python
if ! "$python" -c "import httpx" 2>/dev/null; then
  echo "run.sh: $python has no 'httpx' package: run deploy/python-env.sh" >&2
  exit 1
fi
for bin in router/tandem-router prefill_node/tandem-prefill decode_node/tandem-decode \
  client/tandem model/tools/tandem-make-model engine/tandem-generate; do
  [[ -x $build/$bin ]] || { echo "run.sh: $build/$bin is not built" >&2; exit 1; }
done
auto_out=0
[[ -n $out ]] || { out=$(mktemp -d /tmp/tandem-soak-XXXXXX); auto_out=1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
# A private copy of the binaries: a rebuild of the tree during a long run must not replace the
# CLI the driver starts for each gRPC request, nor mix versions.
for bin in router/tandem-router prefill_node/tandem-prefill decode_node/tandem-decode \
  client/tandem model/tools/tandem-make-model engine/tandem-generate; do
  mkdir -p "$out/bin/$(dirname "$bin")"
  cp "$build/$bin" "$out/bin/$bin"
done
build=$out/bin
export TANDEM_BUILD_DIR=$build TANDEM_RUN_DIR=$out/run
conf=$out/soak.conf
cluster=$repo/deploy/cluster.sh

cleanup() {
  local rc=$?
  bash "$cluster" down "$conf" >"$out/down.log" 2>&1 || true
  if pgrep -f -- "$TANDEM_RUN_DIR/" >/dev/null; then
    echo "FAIL: processes left after down: $(pgrep -af -- "$TANDEM_RUN_DIR/")" >&2
    rc=1
  fi
  rm -rf "$out/bin"
  if [[ $auto_out == 1 && $rc == 0 ]]; then
    rm -rf "$out"
  elif [[ $rc != 0 ]]; then
    echo "soak: logs, samples and summary kept in $out" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT

# The synthetic model's vocabulary and context, which the invalid requests' messages name.
vocab=320
context=2048
"$build/model/tools/tandem-make-model" --out "$out/model.gguf" --vocab "$vocab" \
  --context "$context" >/dev/null
# lease_ms=10000: a lease nobody releases (the known race, docs/RELIABILITY.md "Soak") comes back
# within the driver's 60 s idle wait; leases being pulled are renewed by the decode nodes.
cat >"$conf" <<CONF
model=$out/model.gguf
startup_timeout_s=120
router   listen=127.0.0.1:0 health_interval_ms=500
prefill  tp=2 threads_per_rank=1 kv_budget_mb=4 ucx_tls=sm,self lease_ms=10000
prefill  tp=1 threads_per_rank=1 kv_budget_mb=4 ucx_tls=sm,self lease_ms=10000
decode   tp=1 threads_per_rank=1 kv_budget_mb=4 ucx_tls=sm,self count=2
CONF
bash "$cluster" up "$conf" >"$out/up.log" 2>&1 || {
  echo "FAIL: cluster.sh up failed:" >&2
  tail -n 30 "$out/up.log" >&2
  exit 1
}
echo "soak: cluster up ($(tail -n 1 "$out/up.log")), output in $out"
"$python" "$repo/bench/soak/soak.py" --run_dir="$TANDEM_RUN_DIR" --cli="$build/client/tandem" \
  --generate="$build/engine/tandem-generate" --model="$out/model.gguf" \
  --vocab="$vocab" --context="$context" --csv="$out/samples.csv" \
  --summary_json="$out/summary.json" "${driver_args[@]}"
