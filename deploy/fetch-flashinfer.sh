#!/usr/bin/env bash
# Fetches FlashInfer's CUDA headers once into a cache outside the build tree: the
# `flashinfer/data/include` tree of PyPI's `flashinfer-python` wheel (header-only templates)
# and the CCCL headers it ships beside it (`flashinfer/data/cccl`: libcudacxx, cub, thrust —
# FlashInfer needs a newer libcudacxx than CUDA 13.0's), pinned by SHA-256. The CUDA build
# compiles Tandem's own FlashInfer instantiations (attention/cuda/flashinfer/) against them when
# they are present (CMake cache variable TANDEM_FLASHINFER_INCLUDE, whose default is the
# directory printed here); nothing of them is committed. Only useful where nvcc is installed.
# Idempotent: a complete cached copy is reused without any network access. Prints the
# directory holding include/ (flashinfer/) and cccl/ as the last line of output.
#
#   TANDEM_DATA_CACHE  cache directory (default: ${XDG_CACHE_HOME:-$HOME/.cache}/tandem)
set -euo pipefail
# shellcheck source=deploy/pinned-download.sh
. "$(dirname "$0")/pinned-download.sh"

readonly VERSION="0.7.4"
readonly PACKAGE="flashinfer-python==$VERSION"
readonly WHEEL="flashinfer_python-$VERSION-py3-none-any.whl"
readonly SHA256="a051a62e09a2738e8b0de47a1944fd2f0f3eff01b728b662141ea660cb09dd32"

cache="${TANDEM_DATA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem}"
dest="$cache/flashinfer/$VERSION"
if [ -f "$dest/.complete" ]; then
  echo "fetch-flashinfer: cached: $dest" >&2
  echo "$dest"
  exit 0
fi

mkdir -p "$cache/flashinfer"
tmp=$(mktemp -d "$cache/flashinfer/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetch-flashinfer: downloading $PACKAGE (wheel, ~100 MB) from PyPI" >&2
pinned_download fetch-flashinfer "$WHEEL" "$SHA256" "$tmp" --only-binary :all: "$PACKAGE"
wheel="$tmp/$WHEEL"
unzip -q -o "$wheel" 'flashinfer/data/include/*' 'flashinfer/data/cccl/*' -d "$tmp/x"
[ -f "$tmp/x/flashinfer/data/include/flashinfer/attention/decode.cuh" ] || {
  echo "fetch-flashinfer: $WHEEL holds no flashinfer/data/include/flashinfer/attention/decode.cuh" >&2
  exit 1
}
mkdir -p "$tmp/out"
mv "$tmp/x/flashinfer/data/include" "$tmp/out/include"
mv "$tmp/x/flashinfer/data/cccl" "$tmp/out/cccl"
touch "$tmp/out/.complete"
rm -rf "$dest"
mv "$tmp/out" "$dest"
echo "fetch-flashinfer: verified SHA-256 $SHA256, unpacked into $dest" >&2
echo "$dest"
