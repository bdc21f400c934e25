#!/usr/bin/env bash
# Static checks of deploy/: every script parses (bash -n), every shipped cluster config passes
# `cluster.sh check` with its flag names verified against the built binaries, and malformed
# configs are rejected with exit code 2 and a message naming the problem and its line.
#
#   deploy_scripts_test.sh REPO_ROOT BUILD_DIR
set -euo pipefail

repo=$1
build=$2
cluster="$repo/deploy/cluster.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export TANDEM_BUILD_DIR=$build TANDEM_RUN_DIR=$tmp/run
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

for script in "$repo"/deploy/*.sh; do
  bash -n "$script" || fail "bash -n $script"
done

configs=("$repo"/deploy/configs/*.conf)
[ -e "${configs[0]}" ] || fail "no configs in deploy/configs/"
for conf in "${configs[@]}"; do
  if ! out=$(bash "$cluster" check "$conf" 2>&1); then
    fail "cluster.sh check $conf: $out"
    continue
  fi
  for role in router prefill decode; do
    grep -q "flags of $role lines verified" <<<"$out" ||
      fail "$conf: $role flags were not verified against a binary in $build: $out"
  done
done

# expect_config_error NAME "config text" "expected message fragment"
expect_config_error() {
  local conf="$tmp/$1.conf" out rc=0
  printf '%s\n' "$2" >"$conf"
  out=$(bash "$cluster" check "$conf" 2>&1) || rc=$?
  [ "$rc" -eq 2 ] || fail "$1: exit code $rc, want 2 (output: $out)"
  grep -qF -- "$3" <<<"$out" || fail "$1: output lacks '$3': $out"
}

model="$tmp/model.gguf"
: >"$model"
head="model=$model"
nodes=$'router\nprefill tp=1\ndecode tp=1'
expect_config_error unknown_setting "$head"$'\ncolour=blue\n'"$nodes" \
  "unknown_setting.conf:2: unknown setting 'colour'"
expect_config_error bare_key "$head"$'\nrouter\nprefill tp\ndecode' \
  "bare_key.conf:3: expected key=value, got 'tp'"
expect_config_error empty_value "$head"$'\nrouter\nprefill tp=\ndecode' \
  "empty_value.conf:3: 'tp' has an empty value"
expect_config_error duplicate_key "$head"$'\nrouter\nprefill tp=1 tp=2\ndecode' \
  "duplicate_key.conf:3: 'tp' given twice"
expect_config_error reserved_key "$head"$'\nrouter\nprefill port_file=/x\ndecode' \
  "reserved_key.conf:3: 'port_file' is set by cluster.sh"
expect_config_error router_static_list "$head"$'\nrouter prefill=a:1\nprefill\ndecode' \
  "router_static_list.conf:2: 'prefill' is set by cluster.sh"
expect_config_error two_routers "$head"$'\nrouter\nrouter\nprefill\ndecode' \
  "needs exactly one router line (has 2)"
expect_config_error no_decode "$head"$'\nrouter\nprefill' "needs at least one decode line"
expect_config_error no_prefill "$head"$'\nrouter\ndecode' "needs at least one prefill line"
expect_config_error colocated_with_prefill "$head"$'\nrouter colocated=true\nprefill\ndecode' \
  "router colocated=true takes no prefill lines"
expect_config_error shared_port "$head"$'\nrouter\nprefill count=2 listen=127.0.0.1:6000\ndecode' \
  "count=2 instances cannot share listen=127.0.0.1:6000"
expect_config_error bad_count "$head"$'\nrouter\nprefill count=0\ndecode' \
  "count must be a positive integer"
expect_config_error unknown_flag "$head"$'\nrouter\nprefill tp=1\ndecode tp=1 bogus_flag=3' \
  "unknown_flag.conf:4: tandem-decode has no flag --bogus_flag"
expect_config_error router_flag_on_node "$head"$'\nrouter\nprefill max_attempts=2\ndecode' \
  "router_flag_on_node.conf:3: tandem-prefill has no flag --max_attempts"
expect_config_error missing_model "model=$tmp/absent.gguf"$'\n'"$nodes" "absent.gguf does not exist"
expect_config_error stray_line "$head"$'\n'"$nodes"$'\nworker tp=1' \
  "stray_line.conf:5: expected a setting (key=value) or a router/prefill/decode line"

# A valid config with comments, dashes in keys and repeated node lines expands to one instance
# per count, numbered per role.
printf '%s\n' "$head  # trailing comment" "# a comment line" "" "router listen=127.0.0.1:0" \
  "prefill tp=1 kv-budget-mb=8 count=2" "prefill tp=1" "decode tp=1" >"$tmp/good.conf"
out=$(bash "$cluster" check "$tmp/good.conf" 2>&1) || fail "good.conf rejected: $out"
for inst in prefill-0 prefill-1 prefill-2 decode-0 router; do
  grep -q "^  $inst: " <<<"$out" || fail "good.conf: no $inst in the plan: $out"
done
grep -q -- "--kv_budget_mb=8" <<<"$out" || fail "good.conf: kv-budget-mb not mapped to --kv_budget_mb"

# status/down of a cluster that never ran: down is a no-op, status says down with exit code 3.
rc=0
out=$(bash "$cluster" status "$tmp/good.conf" 2>&1) || rc=$?
[ "$rc" -eq 3 ] || fail "status of a down cluster exits $rc, want 3"
grep -q "cluster good is down" <<<"$out" || fail "status of a down cluster says: $out"
bash "$cluster" down "$tmp/good.conf" >/dev/null 2>&1 || fail "down of a down cluster failed"

rc=0
bash "$cluster" frobnicate "$tmp/good.conf" >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "an unknown command exits $rc, want 2"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "deploy scripts and configs: all checks passed"
