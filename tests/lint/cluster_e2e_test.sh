#!/usr/bin/env bash
# End to end through deploy/cluster.sh on a synthetic model: up (prefill tp=2 -> decode tp=1,
# a head merge), a generation through the router with the `tandem` client, status, an idempotent
# second up, down, and then no process of the cluster may remain. A second config whose prefill
# layout is invalid must make `up` fail with the node's own error and leave nothing running.
# A third config with tls=1: cluster.sh makes a throwaway CA, the cluster runs mutual TLS, a
# client with the CA generates, a plaintext one is refused, status shows https URLs.
# The cluster is always taken down, even when a check fails.
#
#   cluster_e2e_test.sh REPO_ROOT BUILD_DIR TANDEM_MAKE_MODEL
set -euo pipefail

repo=$1
build=$2
make_model=$3
cluster="$repo/deploy/cluster.sh"
client="$build/client/tandem"
tmp=$(mktemp -d)
export TANDEM_BUILD_DIR=$build TANDEM_RUN_DIR=$tmp/run
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# Pids of live processes whose command line mentions this test's run directory.
cluster_processes() {
  local d pid
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -qF -- "$TANDEM_RUN_DIR/" || continue
    [ "$(awk '{print $3}' "$d/stat" 2>/dev/null)" != Z ] && echo "$pid"
  done
  return 0
}

cleanup() {
  local rc=$?
  bash "$cluster" down "$tmp/e2e.conf" >/dev/null 2>&1 || true
  [ ! -f "$tmp/tls.conf" ] || bash "$cluster" down "$tmp/tls.conf" >/dev/null 2>&1 || true
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT

"$make_model" --out "$tmp/model.gguf" >/dev/null
cat >"$tmp/e2e.conf" <<EOF
# synthetic model: 8 query heads, 2 KV heads
model=$tmp/model.gguf
startup_timeout_s=60
router   listen=127.0.0.1:0
prefill  tp=2 kv_budget_mb=8 ucx_tls=sm,self
decode   tp=1 kv_budget_mb=8 ucx_tls=sm,self
EOF

router=$(bash "$cluster" up "$tmp/e2e.conf" | tail -n 1)
[[ $router =~ ^127\.0\.0\.1:[0-9]+$ ]] || fail "up printed '$router', not a router address"
[ "$(cluster_processes | wc -l)" -eq 3 ] || fail "want 3 cluster processes: $(cluster_processes)"

rc=0
text=$("$client" generate --router "$router" --prompt "Hello" --max_tokens 8 --ignore_eos \
  2>"$tmp/stats") || rc=$?
[ "$rc" -eq 0 ] || fail "tandem generate exited $rc: $(cat "$tmp/stats")"
[ -n "$text" ] || fail "tandem generate printed no text"
grep -q "tokens=8 " "$tmp/stats" || fail "generate stats do not report 8 tokens: $(cat "$tmp/stats")"

status=$(bash "$cluster" status "$tmp/e2e.conf") || fail "status exited non-zero: $status"
grep -Eq "^prefill +127\.0\.0\.1:[0-9]+ +yes +2/1/1/16/1" <<<"$status" ||
  fail "status does not show a healthy tp=2 prefill: $status"
grep -Eq "^decode +127\.0\.0\.1:[0-9]+ +yes +1/1/1/16/1" <<<"$status" ||
  fail "status does not show a healthy tp=1 decode: $status"
# Every process's Prometheus endpoint is listed and serves its metrics.
for want in "router:tandem_request_success_total" "prefill-0:tandem_prompt_tokens_total" \
  "decode-0:tandem_generation_tokens_total"; do
  name=${want%%:*} metric=${want#*:}
  url=$(sed -n "s|^  $name: pid .*, metrics \(http://127\.0\.0\.1:[0-9]*/metrics\)$|\1|p" <<<"$status")
  [ -n "$url" ] || { fail "status lists no metrics URL for $name: $status"; continue; }
  body=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$url") ||
    { fail "GET $url failed"; continue; }
  grep -q "^$metric" <<<"$body" || fail "$url has no $metric: $body"
done

again=$(bash "$cluster" up "$tmp/e2e.conf" 2>"$tmp/again.err" | tail -n 1)
[ "$again" = "$router" ] || fail "second up gave '$again', want the running router $router"
grep -q "already running" "$tmp/again.err" || fail "second up did not reuse: $(cat "$tmp/again.err")"

bash "$cluster" down "$tmp/e2e.conf" 2>/dev/null || fail "down failed"
left=$(cluster_processes)
[ -z "$left" ] || fail "processes left after down: $left"
ls "$TANDEM_RUN_DIR"/*.pid >/dev/null 2>&1 && fail "pid files left after down"
rc=0
bash "$cluster" status "$tmp/e2e.conf" >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 3 ] || fail "status after down exited $rc, want 3"
# In sanitizer builds the processes report leaks and UB at exit into their logs.
if grep -lE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$TANDEM_RUN_DIR"/*.log; then
  fail "sanitizer reports in the cluster logs: $(grep -hE -A5 'Sanitizer|runtime error:' "$TANDEM_RUN_DIR"/*.log | head -40)"
fi

# A node that cannot start: up fails, shows the node's log, and stops the rest.
sed 's/prefill  tp=2/prefill  tp=3/' "$tmp/e2e.conf" >"$tmp/bad.conf"
rc=0
bash "$cluster" up "$tmp/bad.conf" >/dev/null 2>"$tmp/bad.err" || rc=$?
[ "$rc" -eq 1 ] || fail "up with an invalid layout exited $rc, want 1"
grep -q "prefill-0 exited before it was ready" "$tmp/bad.err" || fail "no failing node named: $(cat "$tmp/bad.err")"
grep -q "tp must divide the number of query heads" "$tmp/bad.err" ||
  fail "the node's own error is not shown: $(cat "$tmp/bad.err")"
left=$(cluster_processes)
[ -z "$left" ] || fail "processes left after a failed up: $left"

# tls=1: every process with a certificate of a throwaway CA (docs/security.md).
sed -e 's/prefill  tp=2/prefill  tp=1/' -e 's/^startup_timeout_s=60$/startup_timeout_s=60\ntls=1/' \
  "$tmp/e2e.conf" >"$tmp/tls.conf"
tls_dir=$TANDEM_RUN_DIR/tls
router=$(bash "$cluster" up "$tmp/tls.conf" 2>"$tmp/tls.err" | tail -n 1) ||
  fail "tls=1 up failed: $(cat "$tmp/tls.err")"
[ -s "$tls_dir/ca.pem" ] && [ -s "$tls_dir/router.pem" ] && [ -s "$tls_dir/client.key" ] ||
  fail "tls=1 made no certificates in $tls_dir"
grep -q -- "--tls_ca=$tls_dir/ca.pem" "$TANDEM_RUN_DIR/prefill-0.cmd" ||
  fail "prefill-0 was not started with the cluster's CA: $(cat "$TANDEM_RUN_DIR/prefill-0.cmd")"
rc=0
"$client" generate --router "$router" --prompt "Hello" --max_tokens 4 --ignore_eos \
  --tls_ca="$tls_dir/ca.pem" >/dev/null 2>"$tmp/tls_stats" || rc=$?
[ "$rc" -eq 0 ] || fail "generate over TLS exited $rc: $(cat "$tmp/tls_stats")"
grep -q "tokens=4 " "$tmp/tls_stats" || fail "TLS generate stats: $(cat "$tmp/tls_stats")"
rc=0
"$client" generate --router "$router" --prompt "Hello" --max_tokens 4 --timeout_ms=5000 \
  >/dev/null 2>"$tmp/plain_err" || rc=$?
[ "$rc" -eq 1 ] || fail "a plaintext client was not refused by the TLS router (exit $rc)"
status=$(bash "$cluster" status "$tmp/tls.conf") || fail "tls=1 status exited non-zero: $status"
grep -Eq "^decode +127\.0\.0\.1:[0-9]+ +yes" <<<"$status" || fail "tls=1 status: $status"
grep -Eq "^openai api at https://127\.0\.0\.1:[0-9]+/v1$" <<<"$status" ||
  fail "tls=1 status shows no https API URL: $status"
url=$(sed -n 's|^openai api at \(https://.*\)$|\1|p' <<<"$status")
curl -sf --cacert "$tls_dir/ca.pem" "$url/models" | grep -q '"object"' ||
  fail "GET $url/models over HTTPS with the cluster CA failed"
bash "$cluster" down "$tmp/tls.conf" 2>/dev/null || fail "tls=1 down failed"
left=$(cluster_processes)
[ -z "$left" ] || fail "processes left after the tls=1 down: $left"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "cluster.sh end to end: all checks passed"
