#!/usr/bin/env bash
# Every tracked C++/CUDA file is clang-format clean (.clang-format at the root), so formatting
# never shows up in a diff. Usage: format_check.sh SOURCE_DIR CLANG_FORMAT
# Fix a failure with: clang-format -i $(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
set -euo pipefail
src=$1
clang_format=$2
cd "$src"
mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.cu' '*.cuh' '*.cpp' '*.hpp')
if [ "${#files[@]}" -eq 0 ]; then
  echo "format_check: git ls-files found no C++ files in $src (not a git checkout?)" >&2
  exit 1
fi
missing=()
for f in "${files[@]}"; do [ -f "$f" ] || missing+=("$f"); done
present=()
for f in "${files[@]}"; do [ -f "$f" ] && present+=("$f"); done
if ! "$clang_format" --dry-run -Werror "${present[@]}"; then
  echo "format_check: the files above are not clang-format clean; run clang-format -i on them" >&2
  exit 1
fi
echo "format_check: ${#present[@]} files clean (${#missing[@]} tracked files deleted in the work tree)"
