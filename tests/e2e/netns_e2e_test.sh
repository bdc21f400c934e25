#!/usr/bin/env bash
# Network faults between hosts (issue 19), with real tandem-router / tandem-prefill /
# tandem-decode processes in two network namespaces joined by a veth pair, KV over UCX TCP
# across it. Addresses are private to the namespaces this test creates (10.231.N.1 router +
# prefill "host", 10.231.N.2 decode "host"); no traffic leaves them.
#
#   1. reference: a greedy request on the healthy cluster;
#   2. quiet outage: the decode host's link is down 25 s with no traffic, then requests must
#      succeed at once (no stale UCX endpoint or gRPC connection is reused) and match the
#      reference;
#   3. mid-stream outage: with the decode host's uplink rate-limited (tbf) so the token stream is
#      slow, the link goes down 25 s while tokens are streaming; the request must complete,
#      identical to the reference, within its deadline (the router resumes it);
#   4. mid-pull outage: with the prefill host's uplink (KV data to the decode host) rate-limited
#      so a 1200-token prompt's KV takes seconds to pull, the link goes down 25 s right after the
#      first token (prefill) arrived, i.e. during the pull; the request must complete identical
#      to the reference within its deadline;
#   5. a node with --listen=0.0.0.0:PORT and no --advertise refuses to start naming --advertise.
#
# Needs root (namespaces, veth, tc); without it the test is skipped with exit code 77 and the
# reason. Every namespace (with its veth) and process is removed on exit, success or not.
#
#   netns_e2e_test.sh BUILD_DIR TANDEM_MAKE_MODEL
set -euo pipefail

build=$1
make_model=$2
outage_s=${TANDEM_NETNS_OUTAGE_S:-25}

if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: netns_e2e needs root (network namespaces, veth pairs, tc); running as uid $(id -u)"
  exit 77
fi
if ! ip netns add "tnd-probe-$$" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here (ip netns add failed)"
  exit 77
fi
ip netns del "tnd-probe-$$"

net=$((($$ % 200) + 20))  # 10.231.<net>.0/24: distinct between concurrent runs
ns_a="tnd-a-$$"           # router + prefill
ns_b="tnd-b-$$"           # decode
ip_a="10.231.$net.1"
ip_b="10.231.$net.2"
veth_a="tva$$"
veth_b="tvb$$"
tmp=$(mktemp -d)
pids=()

log() { echo "[netns_e2e $(date -u +%H:%M:%S)] $*"; }
fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*.log; do
    [[ -f $f ]] || continue
    echo "--- $(basename "$f") (tail) ---" >&2
    tail -n 25 "$f" >&2
  done
  exit 1
}

cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  if ip netns list | grep -q -- "-$$\b"; then
    echo "FAIL: namespaces left: $(ip netns list)" >&2
    rc=1
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT

# --- network: two namespaces, one veth pair --------------------------------------------------
ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add "$veth_a" type veth peer name "$veth_b"
ip link set "$veth_a" netns "$ns_a"
ip link set "$veth_b" netns "$ns_b"
ip -n "$ns_a" addr add "$ip_a/24" dev "$veth_a"
ip -n "$ns_b" addr add "$ip_b/24" dev "$veth_b"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set "$veth_a" up
ip -n "$ns_b" link set "$veth_b" up

# --- cluster ---------------------------------------------------------------------------------
"$make_model" --out "$tmp/model.gguf" >/dev/null
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
start() {  # start NAME NS DEVICE BINARY ARGS...: UCX over TCP on the veth only
  local name=$1 ns=$2 dev=$3; shift 3
  ip netns exec "$ns" env UCX_TLS=tcp UCX_NET_DEVICES="$dev" "$@" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
}
# Waits (bounded) until FILE exists.
await_file() {
  local file=$1 limit=$2 what=$3
  for _ in $(seq $((limit * 10))); do [[ -s $file ]] && return 0; sleep 0.1; done
  fail "$what: $file not written within ${limit}s"
}

start prefill "$ns_a" "$veth_a" \
  "$build/prefill_node/tandem-prefill" --model="$tmp/model.gguf" --listen="$ip_a:7001" \
  --ucx_tls=tcp --kv_budget_mb=8 --port_file="$tmp/prefill.port"
start decode "$ns_b" "$veth_b" \
  "$build/decode_node/tandem-decode" --model="$tmp/model.gguf" --listen="$ip_b:7002" \
  --ucx_tls=tcp --kv_budget_mb=8 --port_file="$tmp/decode.port"
start router "$ns_a" "$veth_a" "$build/router/tandem-router" --model="$tmp/model.gguf" \
  --listen="$ip_a:7000" --prefill="$ip_a:7001" --decode="$ip_b:7002" --health_interval_ms=1000 \
  --port_file="$tmp/router.port"
await_file "$tmp/prefill.port" 60 "prefill start"
await_file "$tmp/decode.port" 60 "decode start"
await_file "$tmp/router.port" 60 "router start"

# generate OUT TIMEOUT_S MAX_TOKENS: one greedy request through the CLI from the router's host
# (text on stdout -> OUT, the stats or error line on stderr -> OUT.err).
generate() {
  ip netns exec "$ns_a" "$build/client/tandem" generate --router="$ip_a:7000" \
    --prompt="network faults must not lose tokens" --max_tokens="$3" --ignore_eos \
    --timeout_ms=$(($2 * 1000)) >"$1" 2>"$1.err"
}
text_of() { cat "$1"; }

# Healthy: wait (bounded) until the router serves a request.
ok=0
for _ in $(seq 60); do
  if generate "$tmp/warm.out" 10 8; then ok=1; break; fi
  sleep 0.5
done
[[ $ok == 1 ]] || fail "cluster never served a request: $(cat "$tmp/warm.out.err")"
generate "$tmp/ref.out" 30 24 || fail "reference request: $(cat "$tmp/ref.out.err")"
generate "$tmp/ref_long.out" 60 200 || fail "long reference request: $(cat "$tmp/ref_long.out.err")"
# A long prompt (1200 token ids) for the mid-pull case: ~600 KiB of KV on this model.
long_prompt=$(seq 1 1200 | awk '{printf "%s%d", (NR > 1 ? "," : ""), 1 + ($1 * 7) % 300}')
pull_request() {  # pull_request OUT TIMEOUT_S
  ip netns exec "$ns_a" "$build/client/tandem" generate --router="$ip_a:7000" \
    --prompt_ids="$long_prompt" --max_tokens=16 --ignore_eos --timeout_ms=$(($2 * 1000)) \
    >"$1" 2>"$1.err"
}
pull_request "$tmp/ref_pull.out" 60 || fail "long-prompt reference request: $(cat "$tmp/ref_pull.out.err")"
log "reference: $(cat "$tmp/ref.out.err")"

# --- 2. quiet outage ---------------------------------------------------------------------------
log "decode link down for ${outage_s}s, no traffic"
ip -n "$ns_b" link set "$veth_b" down
sleep "$outage_s"  # the outage itself (the scenario), not synchronisation
ip -n "$ns_b" link set "$veth_b" up
up_at=$(date +%s%N)
for i in 1 2 3; do
  # "At once": each request gets 15 s, far below the 25 s outage and the 30 s idle timeout.
  generate "$tmp/after$i.out" 15 24 || fail "request $i after the quiet outage: $(cat "$tmp/after$i.out.err")"
  [[ "$(text_of "$tmp/after$i.out")" == "$(text_of "$tmp/ref.out")" ]] ||
    fail "request $i after the quiet outage differs from the reference"
done
log "3 requests after link-up served in $((($(date +%s%N) - up_at) / 1000000)) ms"

# --- 3. mid-stream outage ----------------------------------------------------------------------
# Slow the decode host's uplink (token events to the router) so the stream is still running when
# the link goes down; the KV pull (prefill -> decode) is not shaped.
ip netns exec "$ns_b" tc qdisc add dev "$veth_b" root tbf rate 16kbit burst 1600 latency 400ms
start_ns=$(date +%s%N)
# Started directly (not in a function) so that $! is the client itself and cleanup can end it.
ip netns exec "$ns_a" "$build/client/tandem" generate --router="$ip_a:7000" \
  --prompt="network faults must not lose tokens" --max_tokens=200 --ignore_eos \
  --timeout_ms=150000 >"$tmp/mid.out" 2>"$tmp/mid.out.err" &
client=$!
pids+=("$client")
# Bounded wait for the stream to have started (text on the CLI's stdout).
started=0
for _ in $(seq 300); do
  if [[ -s $tmp/mid.out ]]; then started=1; break; fi
  kill -0 "$client" 2>/dev/null || break
  sleep 0.1
done
[[ $started == 1 ]] || fail "the long request produced no tokens within 30 s: $(cat "$tmp/mid.out.err")"
kill -0 "$client" 2>/dev/null || fail "the long request finished before the outage (stream too fast)"
log "decode link down for ${outage_s}s mid-stream"
ip -n "$ns_b" link set "$veth_b" down
sleep "$outage_s"  # the outage itself
ip -n "$ns_b" link set "$veth_b" up
ip netns exec "$ns_b" tc qdisc del dev "$veth_b" root
wait "$client" || fail "the request cut mid-stream failed: $(cat "$tmp/mid.out.err")"
[[ "$(text_of "$tmp/mid.out")" == "$(text_of "$tmp/ref_long.out")" ]] ||
  fail "the request cut mid-stream differs from the reference"
log "mid-stream request completed in $((($(date +%s%N) - start_ns) / 1000000)) ms: $(cat "$tmp/mid.out.err")"
grep -q "resumes=[1-9]" "$tmp/router.log" || fail "the router log shows no resume"

# --- 4. mid-pull outage -------------------------------------------------------------------------
# 512 kbit/s from the prefill host: the ~600 KiB pull takes ~10 s.
ip netns exec "$ns_a" tc qdisc add dev "$veth_a" root tbf rate 512kbit burst 3200 latency 400ms
start_ns=$(date +%s%N)
ip netns exec "$ns_a" "$build/client/tandem" generate --router="$ip_a:7000" \
  --prompt_ids="$long_prompt" --max_tokens=16 --ignore_eos --timeout_ms=150000 \
  >"$tmp/pull.out" 2>"$tmp/pull.out.err" &
client=$!
pids+=("$client")
# The first token comes from prefill; decode's pull starts right after it.
started=0
for _ in $(seq 300); do
  if [[ -s $tmp/pull.out ]]; then started=1; break; fi
  kill -0 "$client" 2>/dev/null || break
  sleep 0.1
done
[[ $started == 1 ]] || fail "the long-prompt request produced no first token within 30 s: $(cat "$tmp/pull.out.err")"
kill -0 "$client" 2>/dev/null || fail "the long-prompt request finished before the outage (pull too fast)"
log "decode link down for ${outage_s}s mid-pull"
ip -n "$ns_b" link set "$veth_b" down
sleep "$outage_s"  # the outage itself
ip -n "$ns_b" link set "$veth_b" up
ip netns exec "$ns_a" tc qdisc del dev "$veth_a" root
wait "$client" || fail "the request cut mid-pull failed: $(cat "$tmp/pull.out.err")"
[[ "$(text_of "$tmp/pull.out")" == "$(text_of "$tmp/ref_pull.out")" ]] ||
  fail "the request cut mid-pull differs from the reference"
log "mid-pull request completed in $((($(date +%s%N) - start_ns) / 1000000)) ms: $(cat "$tmp/pull.out.err")"

# --- 5. wildcard listen without --advertise ----------------------------------------------------
set +e
in_ns "$ns_a" timeout 60 "$build/prefill_node/tandem-prefill" --model="$tmp/model.gguf" \
  --listen=0.0.0.0:7101 --metrics_listen= >"$tmp/wildcard.log" 2>&1
rc=$?
set -e
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "tandem-prefill --listen=0.0.0.0 without --advertise did not refuse (rc $rc)"
grep -q -- "--advertise" "$tmp/wildcard.log" || fail "the refusal does not name --advertise"
log "wildcard refused: $(grep -- --advertise "$tmp/wildcard.log")"
echo "PASS"
