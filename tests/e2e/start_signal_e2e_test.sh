#!/usr/bin/env bash
# SIGTERM while a node is still loading its model ends it at once with status 0 (issue 17's
# orderly operations; a large model can take minutes to load). The model path is a FIFO nobody
# writes to, so the load blocks in open() for ever: without the start-up signal watcher
# (serving/node_process.cc) the process would wait for the load and never exit.
#
#   start_signal_e2e_test.sh BUILD_DIR
set -euo pipefail
build=$1
dir=$(mktemp -d /tmp/tandem-start-signal-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
mkfifo "$dir/model.gguf"

# Polls `cmd` every 50 ms until it succeeds or `seconds` pass; returns 1 on time-out.
wait_for() {
  local seconds=$1
  shift
  local end=$((SECONDS + seconds))
  until "$@"; do
    [[ $SECONDS -lt $end ]] || return 1
    sleep 0.05
  done
}
# True while the process's main thread is blocked opening the FIFO (the model load).
in_model_load() { grep -q -E 'fifo|wait_for_partner' "/proc/$1/wchan" 2>/dev/null; }
gone() { ! kill -0 "$1" 2>/dev/null; }

for role in prefill decode; do
  bin=$build/${role}_node/tandem-$role
  log=$dir/$role.log
  "$bin" --model="$dir/model.gguf" --listen=127.0.0.1:0 --port_file="$dir/$role.port" \
    >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  if ! wait_for 30 in_model_load "$pid"; then
    echo "FAIL: tandem-$role never blocked in its model load (wchan: $(cat /proc/$pid/wchan 2>/dev/null))"
    cat "$log"
    exit 1
  fi
  kill -TERM "$pid"
  if ! wait_for 10 gone "$pid"; then
    echo "FAIL: tandem-$role still running 10 s after SIGTERM during its model load"
    cat "$log"
    exit 1
  fi
  status=0
  wait "$pid" || status=$?
  if [[ $status -ne 0 ]]; then
    echo "FAIL: tandem-$role exited with status $status, want 0"
    cat "$log"
    exit 1
  fi
  if ! grep -q "while starting (before serving anything), exiting" "$log"; then
    echo "FAIL: tandem-$role did not say why it exited"
    cat "$log"
    exit 1
  fi
  [[ ! -e $dir/$role.port ]] || { echo "FAIL: tandem-$role wrote its port file"; exit 1; }
  echo "ok: tandem-$role exited 0 on SIGTERM during its model load"
done
