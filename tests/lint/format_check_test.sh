#!/usr/bin/env bash
# format_check.sh can fail: in a scratch git repo with Tandem's .clang-format, a clean file
# passes and a drifted one is reported by name. Usage: format_check_test.sh SOURCE_DIR CLANG_FORMAT
set -euo pipefail
src=$1
clang_format=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$src/.clang-format" "$tmp/"
git -C "$tmp" init -q
printf 'int Add(int a, int b) { return a + b; }\n' >"$tmp/clean.cc"
git -C "$tmp" add .clang-format clean.cc
bash "$src/tests/lint/format_check.sh" "$tmp" "$clang_format" >/dev/null
printf 'int   Sub(int a,int b){return a-b;}\n' >"$tmp/drift.cc"
git -C "$tmp" add drift.cc
if out=$(bash "$src/tests/lint/format_check.sh" "$tmp" "$clang_format" 2>&1); then
  echo "format_check_test: a misformatted file passed the check" >&2
  exit 1
fi
grep -q "drift.cc" <<<"$out" || { echo "format_check_test: drift.cc not named in: $out" >&2; exit 1; }
echo "format_check_test: clean file passes, drifted file is reported"
