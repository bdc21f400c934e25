#!/usr/bin/env bash
# The OpenAI-compatible HTTP API end to end: deploy/cluster.sh starts router + prefill + decode
# on a synthetic model, `up` must print `openai api at http://127.0.0.1:PORT/v1`, and
# openai_api_test.py drives that URL with the real `openai` client from the project's .venv/
# (deploy/python-env.sh). The cluster is always taken down; no process may remain.
#
#   openai_api_e2e_test.sh REPO_ROOT BUILD_DIR TANDEM_MAKE_MODEL
set -euo pipefail

repo=$1
build=$2
make_model=$3
python=${TANDEM_VENV:-$repo/.venv}/bin/python
if ! "$python" -c "import openai" 2>/dev/null; then
  echo "FAIL: $python has no 'openai' package: run deploy/python-env.sh (deploy/test.sh does)" >&2
  exit 1
fi
cluster="$repo/deploy/cluster.sh"
tmp=$(mktemp -d)
export TANDEM_BUILD_DIR=$build TANDEM_RUN_DIR=$tmp/run

cleanup() {
  local rc=$?
  bash "$cluster" down "$tmp/openai.conf" >/dev/null 2>&1 || true
  if pgrep -f -- "$TANDEM_RUN_DIR/" >/dev/null; then
    echo "FAIL: processes left after down: $(pgrep -af -- "$TANDEM_RUN_DIR/")" >&2
    rc=1
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT

# Served as the file's name without .gguf (--served_model_name's default): the test's MODEL.
"$make_model" --out "$tmp/tandem-synthetic.gguf" >/dev/null
# Prefill tp 2, decode tp 1: every API check (structured output, the tool round trips, logprobs,
# the sampler fields) also runs through a mismatched P/D layout.
cat >"$tmp/openai.conf" <<CONF
model=$tmp/tandem-synthetic.gguf
startup_timeout_s=60
router   listen=127.0.0.1:0 health_interval_ms=200 unhealthy_wait_ms=2000
prefill  tp=2 kv_budget_mb=8 ucx_tls=sm,self
decode   tp=1 kv_budget_mb=8 ucx_tls=sm,self
CONF

out=$(bash "$cluster" up "$tmp/openai.conf")
router=$(tail -n 1 <<<"$out")
url=$(sed -n 's/^openai api at //p' <<<"$out")
[[ $url =~ ^http://127\.0\.0\.1:[0-9]+/v1$ ]] || { echo "FAIL: up printed no 'openai api at' URL: $out" >&2; exit 1; }
status=$(bash "$cluster" status "$tmp/openai.conf")
grep -qxF "openai api at $url" <<<"$status" || { echo "FAIL: status does not print the URL: $status" >&2; exit 1; }

"$python" "$repo/tests/e2e/openai_api_test.py" --base-url "$url" --router "$router" \
  --client "$build/client/tandem" --router-log "$TANDEM_RUN_DIR/router.log" \
  --decode-pid-file "$TANDEM_RUN_DIR/decode-0.pid" || {
  echo "--- router log (tail) ---" >&2
  tail -n 30 "$TANDEM_RUN_DIR/router.log" >&2
  exit 1
}
