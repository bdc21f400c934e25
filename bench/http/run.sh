#!/usr/bin/env bash
# HTTP library choice by measurement: each candidate server (bench/http/sse_server_*; `tandem` is
# serving/http_server.h as the router uses it: one libevent loop, first built on the chosen
# cpp-httplib) streams
# TOKENS server-sent events every INTERVAL_MS to N concurrent clients (sse_load, one poll thread),
# for N in CONNECTIONS. Prints per library and N: streams completed / failed, wall time, the
# largest gap between two events of one stream, the server's peak RSS, CPU seconds and threads.
#
#   bench/http/run.sh [BUILD_DIR]   (env: CONNECTIONS="512 1024" TOKENS=64 INTERVAL_MS=20,
#                                    TIMEOUT_S=60 per run, ONLY=<label> for one candidate)
set -euo pipefail
build=${1:-build}
connections=${CONNECTIONS:-512 1024}
tokens=${TOKENS:-64}
interval=${INTERVAL_MS:-20}
tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
ulimit -n 8192
hz=$(getconf CLK_TCK)

# label  server binary  extra flags (httplib twice: as shipped, and with its backlog raised)
candidates=(
  "httplib httplib"
  "httplib_backlog4096 httplib --backlog=4096"
  "civetweb civetweb"
  "tandem_http_server tandem"
)
for candidate in "${candidates[@]}"; do
  read -r lib server extra <<<"$candidate"
  [[ -z ${ONLY:-} || $lib == "$ONLY" ]] || continue
  bin=$build/bench/http/sse_server_$server
  if [[ ! -x $bin ]]; then echo "skip $lib: $bin not built"; continue; fi
  for n in $connections; do
    rm -f "$tmp/port"
    # shellcheck disable=SC2086
    "$bin" --threads=$((n + 64)) --tokens="$tokens" --interval_ms="$interval" \
      --port_file="$tmp/port" $extra &
    server_pid=$!
    for _ in $(seq 100); do [[ -s $tmp/port ]] && break; sleep 0.1; done
    [[ -s $tmp/port ]] || { echo "$lib: server did not start"; exit 1; }
    out=$("$build/bench/http/sse_load" --port="$(cat "$tmp/port")" --connections="$n" \
      --timeout_s="${TIMEOUT_S:-60}" || true)
    read -r utime stime < <(awk '{print $14, $15}' "/proc/$server_pid/stat")
    rss_kb=$(awk '/^VmHWM/ {print $2}' "/proc/$server_pid/status")
    threads=$(awk '/^Threads/ {print $2}' "/proc/$server_pid/status")
    kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
    echo "$out" | sed "s/^RESULT /RESULT ${lib}_${n}_/"
    echo "RESULT ${lib}_${n}_server_peak_rss_mib=$((rss_kb / 1024))"
    echo "RESULT ${lib}_${n}_server_cpu_s=$(echo "scale=2; ($utime + $stime) / $hz" | bc)"
    echo "RESULT ${lib}_${n}_server_threads=$threads"
  done
done
