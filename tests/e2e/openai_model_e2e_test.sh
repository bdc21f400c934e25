#!/usr/bin/env bash
# The demo's question through the OpenAI-compatible HTTP API on the real model: the demo cluster
# (deploy/configs/demo.conf: prefill tp=3 -> decode tp=1) started by deploy/cluster.sh, and
# deploy/openai-ask.sh (curl, server-sent events) must stream an answer that names Paris.
#
#   openai_model_e2e_test.sh REPO_ROOT BUILD_DIR      (TANDEM_MODEL: the SmolLM2 GGUF)
set -euo pipefail

repo=$1
build=$2
[ -n "${TANDEM_MODEL:-}" ] && [ -e "$TANDEM_MODEL" ] || {
  echo "FAIL: TANDEM_MODEL is not set to the model file (deploy/fetch-model.sh)" >&2
  exit 1
}
cluster="$repo/deploy/cluster.sh"
config="$repo/deploy/configs/demo.conf"
tmp=$(mktemp -d)
export TANDEM_BUILD_DIR=$build TANDEM_RUN_DIR=$tmp/run

cleanup() {
  local rc=$?
  bash "$cluster" down "$config" >/dev/null 2>&1 || true
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT

out=$(bash "$cluster" up "$config")
url=$(sed -n 's/^openai api at //p' <<<"$out")
[ -n "$url" ] || { echo "FAIL: up printed no 'openai api at' URL: $out" >&2; exit 1; }
answer=$(bash "$repo/deploy/openai-ask.sh" "$url" \
  "What is the capital of France? Answer in one sentence." 64)
echo "answer: $answer"
grep -q "Paris" <<<"$answer" || { echo "FAIL: the answer does not name Paris" >&2; exit 1; }
