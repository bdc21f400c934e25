#!/usr/bin/env bash
# The Tandem demo (README command one). On a fresh Debian 12 machine it installs the packages,
# fetches SmolLM2-135M-Instruct, builds the four binaries it needs into build/, starts a local
# cluster (deploy/configs/demo.conf: prefill tp=3 -> decode tp=1, so every KV transfer merges
# heads), streams the answer to a chat prompt through gRPC (`tandem generate`) and through the
# OpenAI-compatible HTTP API (curl, server-sent events), prints the fleet and shuts the cluster
# down.
#
#   deploy/demo.sh ["chat prompt"]
#
# Idempotent: packages, the model and the build are reused. The cluster is always stopped at
# the end (also on failure or Ctrl-C) unless it was already running before the demo started, in
# which case the demo uses it and leaves it running.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly CONFIG=deploy/configs/demo.conf
readonly BUILD=build  # the build tree deploy/test.sh uses
prompt=${1:-"What is the capital of France? Answer in one sentence."}
[ $# -le 1 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

step() { echo "==> $*" >&2; }
cluster() { TANDEM_BUILD_DIR="$PWD/$BUILD" bash deploy/cluster.sh "$@"; }

step "installing Debian packages (deploy/install-deps.sh)"
bash deploy/install-deps.sh

step "fetching the model (deploy/fetch-model.sh)"
TANDEM_MODEL=$(bash deploy/fetch-model.sh | tail -n 1)
export TANDEM_MODEL

fi_args=()
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  step "fetching FlashInfer's headers for the CUDA build (deploy/fetch-flashinfer.sh)"
  fi_args=("-DTANDEM_FLASHINFER_DIR=$(bash deploy/fetch-flashinfer.sh | tail -n 1)")
fi

step "configuring $BUILD/ (log: $BUILD.configure.log)"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${fi_args[@]}" \
  >"$BUILD.configure.log" 2>&1 || {
  cat "$BUILD.configure.log" >&2
  exit 1
}
step "building tandem-prefill tandem-decode tandem-router tandem (2 jobs; the first build takes a while)"
cmake --build "$BUILD" -j 2 --target tandem-prefill tandem-decode tandem-router tandem

# A demo cluster left half-running by an earlier, killed demo is cleared first.
set +e
cluster status "$CONFIG" >/dev/null 2>&1
state=$?
set -e
stop_at_exit=1
case "$state" in
  0)
    step "the demo cluster is already running; using it and leaving it running"
    stop_at_exit=0
    ;;
  3) ;;
  *)
    step "clearing a half-running demo cluster from an earlier run"
    cluster down "$CONFIG"
    ;;
esac
if [ "$stop_at_exit" -eq 1 ]; then
  trap 'step "shutting the cluster down"; cluster down "$CONFIG"' EXIT
  trap 'echo >&2; exit 130' INT TERM
fi

step "starting the cluster ($CONFIG: router + prefill tp=3 + decode tp=1)"
up=$(cluster up "$CONFIG")
router=$(tail -n 1 <<<"$up")
openai=$(sed -n 's/^openai api at //p' <<<"$up")

step "asking: $prompt"
"$BUILD/client/tandem" generate --router "$router" --chat "$prompt" --max_tokens 128
echo

step "asking the same through the OpenAI API at $openai (curl, streaming: deploy/openai-ask.sh)"
bash deploy/openai-ask.sh "$openai" "$prompt" 128

step "fleet status"
"$BUILD/client/tandem" status --router "$router"
