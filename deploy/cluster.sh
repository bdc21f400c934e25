#!/usr/bin/env bash
# Runs a Tandem cluster (router + prefill + decode processes) on this machine from a cluster
# config file. See docs/deployment.md for the config format and troubleshooting.
#
#   deploy/cluster.sh up CONFIG      start every instance, wait until the router reports all of
#                                    them healthy, print `openai api at http://HOST:PORT/v1`
#                                    and the router's gRPC address (last stdout line)
#   deploy/cluster.sh down CONFIG    stop exactly the processes `up` started (SIGTERM, bounded
#                                    wait, SIGKILL) and remove their pid and port files
#   deploy/cluster.sh status CONFIG  list the processes, the OpenAI API URL and the fleet
#                                    (`tandem status`)
#   deploy/cluster.sh check CONFIG   validate the config (syntax, flag names against the built
#                                    binaries when present) and print the commands `up` would run
#
# With `tls=1` in the config, `up` makes a throwaway CA and a certificate per process (openssl) in
# <run dir>/tls/ and runs every process with mutual TLS (docs/security.md).
#
# `up` is idempotent: if the same config is already running it reuses the cluster and prints its
# address; a cluster that is partly running, or running another config, is refused (run `down`).
# A failed `up` stops whatever it started.
#
# Environment:
#   TANDEM_RUN_DIR    run directory (default: <repo>/run/<config name>/): logs, pid and port files
#   TANDEM_BUILD_DIR  overrides the config's build_dir
#   TANDEM_MODEL      model path used when the config says model=auto (else deploy/fetch-model.sh)
#
# Exit codes: 0 success; 1 runtime failure; 2 usage or config error; 3 `status`: cluster is down.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly REPO
readonly ROLES=(router prefill decode)
readonly STOP_TIMEOUT_S=15

log() { echo "cluster.sh: $*" >&2; }
indent() { sed 's/^/    /'; }
die() { log "error: $*"; exit 1; }
config_error() { log "config error: $*"; exit 2; }

usage() {
  sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# ---- Config ------------------------------------------------------------------------------------
# Globals set by parse_config.
cfg_file="" cfg_name="" cfg_model="auto" cfg_build_dir="build" cfg_startup_timeout_s=300 cfg_tls=0
inst_names=() inst_roles=() inst_flags=()  # one entry per process; flags newline-separated
router_flags=""
line_roles=() line_numbers=() line_flags=()  # one entry per router/prefill/decode line
n_router=0 n_prefill=0 n_decode=0
declare -A seen_settings=()

# Keys cluster.sh sets itself (per role); a config may not set them.
reserved_key() {
  local role=$1 key=$2
  case "$key" in
    model | port_file) return 0 ;;
  esac
  case "$role:$key" in
    router:prefill | router:decode | router:http_port_file) return 0 ;;
    prefill:router | decode:router) return 0 ;;  # nodes are wired with --prefill/--decode
    prefill:metrics_port_file | decode:metrics_port_file) return 0 ;;
  esac
  return 1
}

# The port part of host:port ("" when there is none).
port_of() { [[ $1 == *:* ]] && echo "${1##*:}" || echo ""; }

# The value of --NAME in newline-separated FLAGS, else DEFAULT.
flag_value() {  # flag_value NAME DEFAULT FLAGS
  if [[ $3 == *"--$1="* ]]; then
    local v=${3#*--"$1"=}
    echo "${v%%$'\n'*}"
  else
    echo "$2"
  fi
}

# One `key=value` setting line.
parse_setting() {
  local where=$1 key=${2%%=*} value=${2#*=}
  [ -n "$value" ] || config_error "$where: '$key' has an empty value"
  [ -z "${seen_settings[$key]:-}" ] || config_error "$where: '$key' given twice"
  seen_settings[$key]=1
  case "$key" in
    model) cfg_model=$value ;;
    build_dir) cfg_build_dir=$value ;;
    name)
      [[ $value =~ ^[A-Za-z0-9._-]+$ ]] || config_error "$where: name may use [A-Za-z0-9._-]"
      cfg_name=$value
      ;;
    startup_timeout_s)
      [[ $value =~ ^[1-9][0-9]*$ ]] || config_error "$where: startup_timeout_s must be > 0"
      cfg_startup_timeout_s=$value
      ;;
    tls)
      [[ $value =~ ^[01]$ ]] || config_error "$where: tls must be 0 or 1"
      cfg_tls=$value
      ;;
    *) config_error "$where: unknown setting '$key' (model, build_dir, name, startup_timeout_s, tls)" ;;
  esac
}

# One `router|prefill|decode key=value...` line: records the line and expands it into `count`
# instances, numbered per role.
parse_process_line() {
  local where=$1 lineno=$2 role=$3 count=1 flags="" tok key value l v i
  shift 3
  local -A seen=()
  for tok in "$@"; do
    [[ $tok == *=* ]] || config_error "$where: expected key=value, got '$tok'"
    key=${tok%%=*}
    value=${tok#*=}
    key=${key//-/_}
    [[ $key =~ ^[a-z][a-z0-9_]*$ ]] || config_error "$where: bad key '$key'"
    [ -n "$value" ] || config_error "$where: '$key' has an empty value"
    [ -z "${seen[$key]:-}" ] || config_error "$where: '$key' given twice"
    seen[$key]=1
    if [ "$key" = count ]; then
      [[ $value =~ ^[1-9][0-9]*$ ]] || config_error "$where: count must be a positive integer"
      [ "$role" != router ] || config_error "$where: there is exactly one router (no count)"
      count=$value
    elif reserved_key "$role" "$key"; then
      config_error "$where: '$key' is set by cluster.sh and may not appear on a $role line"
    else
      flags+="--$key=$value"$'\n'
    fi
  done
  if [ "$count" -gt 1 ]; then
    for l in listen advertise; do
      v=$(flag_value "$l" "" "$flags")
      if [ -n "$v" ] && { [ "$l" = advertise ] || [ "$(port_of "$v")" != 0 ]; }; then
        config_error "$where: count=$count instances cannot share $l=$v (use port 0)"
      fi
    done
  fi
  line_roles+=("$role")
  line_numbers+=("$lineno")
  line_flags+=("$flags")
  if [ "$role" = router ]; then
    n_router=$((n_router + 1))
    router_flags=$flags
    return
  fi
  for ((i = 0; i < count; i++)); do
    if [ "$role" = prefill ]; then
      inst_names+=("prefill-$n_prefill")
      n_prefill=$((n_prefill + 1))
    else
      inst_names+=("decode-$n_decode")
      n_decode=$((n_decode + 1))
    fi
    inst_roles+=("$role")
    inst_flags+=("$flags")
  done
}

parse_config() {
  cfg_file=$1
  [ -f "$cfg_file" ] || config_error "no such config file: $cfg_file"
  cfg_name=$(basename "$cfg_file")
  cfg_name=${cfg_name%.conf}
  local lineno=0 line toks where
  while IFS= read -r line || [ -n "$line" ]; do
    lineno=$((lineno + 1))
    line=${line%%#*}
    read -ra toks <<<"$line" || true
    [ ${#toks[@]} -eq 0 ] && continue
    where="$cfg_file:$lineno"
    case "${toks[0]}" in
      router | prefill | decode) parse_process_line "$where" "$lineno" "${toks[@]}" ;;
      *=*)
        [ ${#toks[@]} -eq 1 ] || config_error "$where: a setting is one key=value (got '$line')"
        parse_setting "$where" "${toks[0]}"
        ;;
      *) config_error "$where: expected a setting (key=value) or a router/prefill/decode line" ;;
    esac
  done <"$cfg_file"
  if [ "$cfg_tls" = 1 ]; then
    local flags
    for flags in "${line_flags[@]}"; do
      [[ $flags != *"--tls_"* ]] || config_error "$cfg_file: with tls=1 cluster.sh sets --tls_cert/--tls_key/--tls_ca itself"
    done
  fi
  [ "$n_router" -eq 1 ] || config_error "$cfg_file: needs exactly one router line (has $n_router)"
  # Colocated serving (router colocated=true): decode nodes prefill themselves, no prefill lines.
  if [[ $router_flags == *"--colocated=true"* ]]; then
    [ "$n_prefill" -eq 0 ] || config_error "$cfg_file: router colocated=true takes no prefill lines (decode nodes with colocated_prefill=true prefill themselves)"
  else
    [ "$n_prefill" -ge 1 ] || config_error "$cfg_file: needs at least one prefill line"
  fi
  [ "$n_decode" -ge 1 ] || config_error "$cfg_file: needs at least one decode line"
  if [ -n "${TANDEM_BUILD_DIR:-}" ]; then cfg_build_dir=$TANDEM_BUILD_DIR; fi
  [[ $cfg_build_dir == /* ]] || cfg_build_dir="$REPO/$cfg_build_dir"
  if [ "$cfg_model" != auto ] && [[ $cfg_model != /* ]]; then cfg_model="$REPO/$cfg_model"; fi
  # Absolute, so the --port_file paths that identify our processes never depend on the cwd.
  run_dir=$(realpath -m "${TANDEM_RUN_DIR:-$REPO/run/$cfg_name}")
}

binary_of() {
  case "$1" in
    router) echo "$cfg_build_dir/router/tandem-router" ;;
    prefill) echo "$cfg_build_dir/prefill_node/tandem-prefill" ;;
    decode) echo "$cfg_build_dir/decode_node/tandem-decode" ;;
    client) echo "$cfg_build_dir/client/tandem" ;;
  esac
}

# Flag names a binary accepts, one a line, from its --helpfull listing.
flags_of() {
  local out
  out=$("$1" --helpfull 2>&1 || true)
  sed -n 's/^    --\([A-Za-z0-9_]*\) (.*/\1/p' <<<"$out"
}

# Checks every configured flag name against the binaries that exist (one --helpfull each).
verify_flags() {
  local role bin known name i
  for role in "${ROLES[@]}"; do
    bin=$(binary_of "$role")
    if [ ! -x "$bin" ]; then
      log "note: $bin is not built; $role flag names not verified"
      continue
    fi
    known=$(flags_of "$bin")
    [ -n "$known" ] || die "$bin --helpfull listed no flags (does the binary run?)"
    for i in "${!line_roles[@]}"; do
      [ "${line_roles[$i]}" = "$role" ] || continue
      while IFS= read -r name; do
        [ -n "$name" ] || continue
        name=${name#--}
        name=${name%%=*}
        grep -qx -- "$name" <<<"$known" || config_error \
          "$cfg_file:${line_numbers[$i]}: $(basename "$bin") has no flag --$name (see docs/configuration.md)"
      done <<<"${line_flags[$i]}"
    done
    log "flags of $role lines verified against $bin"
  done
}

# ---- Processes ---------------------------------------------------------------------------------
# A pid file holds "PID STARTTIME" (starttime: field 22 of /proc/PID/stat), so a recycled pid
# is never mistaken for ours; the command line must also carry our --port_file.

proc_starttime() {
  local stat rest f
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  rest=${stat##*) }
  read -ra f <<<"$rest"
  [ "${f[0]}" != Z ] || return 1  # a zombie has exited
  echo "${f[19]}"
}

# True when the process recorded for instance $1 is alive and is the one we started.
instance_alive() {
  local name=$1 pid start now
  [ -f "$run_dir/$name.pid" ] || return 1
  read -r pid start <"$run_dir/$name.pid" || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  now=$(proc_starttime "$pid") || return 1
  [ "$now" = "$start" ] || return 1
  tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "--port_file=$run_dir/$name.port"
}

instance_pid() { read -r pid _ <"$run_dir/$1.pid" && echo "$pid"; }

all_instances() { echo router "${inst_names[@]}"; }

# Sets the caller's `args` to the command line of instance $1 (an index into inst_*, or
# "router" followed by the prefill and decode address lists). Nodes listen on 127.0.0.1:0
# unless the config says otherwise.
command_of() {
  local name role flags
  if [ "$1" = router ]; then
    name=router role=router flags=$router_flags
  else
    name=${inst_names[$1]} role=${inst_roles[$1]} flags=${inst_flags[$1]}
  fi
  args=("$(binary_of "$role")" "--model=$cfg_model" "--port_file=$run_dir/$name.port")
  [[ $flags == *"--listen="* ]] || args+=(--listen=127.0.0.1:0)
  [ "$role" != router ] || args+=("--prefill=$2" "--decode=$3" "--http_port_file=$run_dir/router.http_port")
  [ "$role" = router ] || args+=("--metrics_port_file=$run_dir/$name.metrics_port")
  [ "$cfg_tls" = 0 ] || args+=("--tls_cert=$run_dir/tls/$name.pem" "--tls_key=$run_dir/tls/$name.key"
    "--tls_ca=$run_dir/tls/ca.pem")
  [ -z "$flags" ] || mapfile -t -O "${#args[@]}" args <<<"${flags%$'\n'}"
}

# http, or https when the cluster runs TLS (the router's HTTP API; nodes' /metrics stay http).
router_scheme() { [ "$cfg_tls" = 1 ] && echo https || echo http; }

# Sets `client_tls` to the `tandem` CLI's TLS flags for this cluster (its client certificate
# opens ClusterStatus, also when the router requires API keys).
client_tls_args() {
  client_tls=()
  [ "$cfg_tls" = 1 ] || return 0
  client_tls=("--tls_ca=$run_dir/tls/ca.pem" "--tls_cert=$run_dir/tls/client.pem"
    "--tls_key=$run_dir/tls/client.key")
}

# tls=1: a throwaway CA and one certificate per process (+ `client` for the CLI), EC P-256, valid
# 30 days, for 127.0.0.1, ::1, localhost, this host's name and every configured listen/advertise
# host. Serving and client use (mutual TLS). Regenerated by every fresh `up`.
make_certificates() {
  local dir=$run_dir/tls name host hosts=(127.0.0.1 ::1 localhost) san="" flags h
  command -v openssl >/dev/null || die "tls=1 needs the openssl command (deploy/install-deps.sh)"
  rm -rf "$dir"
  mkdir -m 700 -p "$dir"
  hosts+=("$(hostname)")
  for flags in "${line_flags[@]}"; do
    for h in listen advertise http_listen; do
      host=$(flag_value "$h" "" "$flags")
      host=${host%:*}
      host=${host#[}
      host=${host%]}
      case "$host" in "" | 0.0.0.0 | ::) continue ;; esac
      hosts+=("$host")
    done
  done
  local -A seen_hosts=()
  for host in "${hosts[@]}"; do
    [ -z "${seen_hosts[$host]:-}" ] || continue
    seen_hosts[$host]=1
    if [[ $host =~ ^[0-9.]+$ || $host == *:* ]]; then san+=",IP:$host"; else san+=",DNS:$host"; fi
  done
  san=${san#,}
  local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 30 \
    -subj "/CN=tandem cluster $cfg_name throwaway CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>"$dir/openssl.log" || die "openssl could not make the CA (see $dir/openssl.log)"
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n' \
    "$san" >"$dir/ext.cnf"
  for name in $(all_instances) client; do
    openssl req "${ec[@]}" -keyout "$dir/$name.key" -out "$dir/$name.csr" \
      -subj "/CN=tandem-$name" 2>>"$dir/openssl.log" &&
      openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 30 -extfile "$dir/ext.cnf" -out "$dir/$name.pem" \
        2>>"$dir/openssl.log" || die "openssl could not make the certificate of $name (see $dir/openssl.log)"
    rm -f "$dir/$name.csr"
  done
  chmod 600 "$dir"/*.key
  log "tls=1: throwaway CA and certificates for ${san//,/ } in $dir"
}

# The Prometheus /metrics URL of instance $1: the router's HTTP port, a node's --metrics_listen
# ("" when it serves none or has not bound it yet).
metrics_url() {
  local name=$1 file listen="" i
  if [ "$name" = router ]; then
    file=$run_dir/router.http_port
    listen=$(flag_value http_listen 127.0.0.1:0 "$router_flags")
  else
    file=$run_dir/$name.metrics_port
    for i in "${!inst_names[@]}"; do
      [ "${inst_names[$i]}" != "$name" ] ||
        listen=$(flag_value metrics_listen 127.0.0.1:0 "${inst_flags[$i]}")
    done
  fi
  [ -s "$file" ] || return 0
  local scheme=http
  [ "$name" != router ] || scheme=$(router_scheme)
  echo "$scheme://$(address_of "$name" "$listen" "$(<"$file")")/metrics"
}

# Starts binary $2 for instance $1 with the remaining arguments in its own session (Ctrl-C in
# the terminal does not reach it; `down` stops it), stdout/stderr to $1.log.
start_instance() {
  local name=$1 bin=$2
  shift 2
  local pidfile="$run_dir/$name.pid"
  rm -f "$pidfile" "$run_dir/$name.port" "$run_dir/$name.metrics_port"
  { printf '%q' "$bin"; printf ' %q' "$@"; echo; } >"$run_dir/$name.cmd"
  # The child records its own pid before exec'ing the binary, so the pid is right even if
  # setsid had to fork.
  # shellcheck disable=SC2016 # $$ and $1 are the child's, not ours
  setsid bash -c 'echo $$ >"$1.new" && mv "$1.new" "$1" && shift && exec "$@"' \
    _ "$pidfile" "$bin" "$@" >"$run_dir/$name.log" 2>&1 </dev/null 9>&- &
  local deadline=$((SECONDS + 10)) pid start
  until [ -s "$pidfile" ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "$name did not start (see $run_dir/$name.log)"
    sleep 0.05
  done
  read -r pid <"$pidfile"
  start=$(proc_starttime "$pid") || fail_instance "$name" "exited before it was ready"
  echo "$pid $start" >"$pidfile.new"
  mv "$pidfile.new" "$pidfile"
}

fail_instance() {
  log "error: $1 $2; last lines of $run_dir/$1.log:"
  tail -n 20 "$run_dir/$1.log" | indent >&2
  exit 1
}

# Waits until every named instance has written its port file (i.e. is READY).
wait_ready() {
  local deadline=$((SECONDS + cfg_startup_timeout_s)) name pending
  while :; do
    pending=()
    for name in "$@"; do
      [ -s "$run_dir/$name.port" ] && continue
      instance_alive "$name" || fail_instance "$name" "exited before it was ready"
      pending+=("$name")
    done
    [ ${#pending[@]} -eq 0 ] && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      fail_instance "${pending[0]}" "not ready after ${cfg_startup_timeout_s}s (startup_timeout_s)"
    fi
    sleep 0.2
  done
}

# host:port other processes use to reach an instance that listens on $2 and bound port $3.
address_of() {
  local host=${2%:*}
  case "$host" in
    0.0.0.0 | "" | "[::]") host=127.0.0.1 ;;
  esac
  echo "$host:$3"
}

node_address() {
  local i=$1 port
  port=$(<"$run_dir/${inst_names[$i]}.port")
  local advertise
  advertise=$(flag_value advertise "" "${inst_flags[$i]}")
  if [ -n "$advertise" ]; then echo "$advertise"; return; fi
  address_of "${inst_names[$i]}" "$(flag_value listen 127.0.0.1:0 "${inst_flags[$i]}")" "$port"
}

# Prints the router's fleet table; true when every configured node is listed healthy.
fleet_healthy() {
  local out
  local client_tls
  client_tls_args
  out=$("$(binary_of client)" status --router "$1" --timeout_ms=5000 "${client_tls[@]}" 2>&1) ||
    return 1
  local want_p=0 want_d=0 r
  for r in "${inst_roles[@]}"; do
    if [ "$r" = prefill ]; then want_p=$((want_p + 1)); else want_d=$((want_d + 1)); fi
  done
  local got_p got_d
  got_p=$(awk '$1 == "prefill" && $3 == "yes"' <<<"$out" | wc -l)
  got_d=$(awk '$1 == "decode" && $3 == "yes"' <<<"$out" | wc -l)
  last_fleet=$out
  [ "$got_p" -eq "$want_p" ] && [ "$got_d" -eq "$want_d" ]
}

# Stops the recorded processes of this cluster: router first (no new requests), then the nodes.
stop_all() {
  local phase name pid stopped=0
  for phase in router nodes; do
    local pids=() names=()
    for name in $(all_instances); do
      if [ "$phase" = router ] && [ "$name" != router ]; then continue; fi
      if [ "$phase" = nodes ] && [ "$name" = router ]; then continue; fi
      [ -f "$run_dir/$name.pid" ] || continue
      if instance_alive "$name"; then
        pid=$(instance_pid "$name")
        kill -TERM "$pid" 2>/dev/null || true
        pids+=("$pid")
        names+=("$name")
      else
        log "$name: recorded process is gone (or the pid now belongs to another process)"
      fi
    done
    local deadline=$((SECONDS + STOP_TIMEOUT_S)) i left
    while :; do
      left=0
      for i in "${!names[@]}"; do instance_alive "${names[$i]}" && left=1; done
      [ $left -eq 0 ] || [ "$SECONDS" -ge "$deadline" ] && break
      sleep 0.1
    done
    for i in "${!names[@]}"; do
      if instance_alive "${names[$i]}"; then
        log "${names[$i]} (pid ${pids[$i]}) ignored SIGTERM for ${STOP_TIMEOUT_S}s; sending SIGKILL"
        kill -KILL "${pids[$i]}" 2>/dev/null || true
      fi
      stopped=$((stopped + 1))
    done
    deadline=$((SECONDS + 5))
    for i in "${!names[@]}"; do
      while instance_alive "${names[$i]}"; do
        [ "$SECONDS" -lt "$deadline" ] || die "${names[$i]} (pid ${pids[$i]}) survived SIGKILL"
        sleep 0.1
      done
    done
  done
  for name in $(all_instances); do
    rm -f "$run_dir/$name.pid" "$run_dir/$name.port" "$run_dir/$name.port.tmp" \
      "$run_dir/$name.metrics_port"
  done
  rm -f "$run_dir/router.addr" "$run_dir/router.http_port" "$run_dir/openai.url" "$run_dir/cluster.conf"
  stopped_count=$stopped
}

# running | down | partial (some recorded processes alive, some not)
cluster_state() {
  local name alive=0 dead=0
  for name in $(all_instances); do
    [ -f "$run_dir/$name.pid" ] || { dead=$((dead + 1)); continue; }
    if instance_alive "$name"; then alive=$((alive + 1)); else dead=$((dead + 1)); fi
  done
  if [ $alive -eq 0 ]; then echo down; elif [ $dead -eq 0 ]; then echo running; else echo partial; fi
}

resolve_model() {
  if [ "$cfg_model" = auto ]; then
    if [ -n "${TANDEM_MODEL:-}" ]; then
      cfg_model=$TANDEM_MODEL
    else
      log "model=auto: fetching the model with deploy/fetch-model.sh"
      cfg_model=$(bash "$REPO/deploy/fetch-model.sh" | tail -n 1)
    fi
  fi
  [ -e "$cfg_model" ] || die "model $cfg_model does not exist"
}

# ---- Commands ----------------------------------------------------------------------------------

# One up/down at a time per run directory (fd 9 holds the lock; children never inherit it).
lock_run_dir() {
  mkdir -p "$run_dir"
  exec 9>"$run_dir/.lock"
  flock -n 9 || die "another cluster.sh up/down is running on $run_dir"
}

cmd_check() {
  if [ "$cfg_model" != auto ] && [ ! -e "$cfg_model" ]; then
    config_error "$cfg_file: model $cfg_model does not exist"
  fi
  verify_flags
  [ "$cfg_model" != auto ] || cfg_model="<auto>"
  echo "cluster $cfg_name: model=$cfg_model build_dir=$cfg_build_dir run_dir=$run_dir"
  local i args
  for i in "${!inst_names[@]}"; do
    command_of "$i"
    echo "  ${inst_names[$i]}: ${args[*]}"
  done
  command_of router "<prefill addresses>" "<decode addresses>"
  echo "  router: ${args[*]}"
  echo "config $cfg_file is valid"
}

cmd_up() {
  lock_run_dir
  local state
  state=$(cluster_state)
  if [ "$state" = running ]; then
    if cmp -s "$cfg_file" "$run_dir/cluster.conf" && [ -s "$run_dir/router.addr" ]; then
      log "cluster $cfg_name is already running (run dir $run_dir); reusing it"
      print_openai_url
      cat "$run_dir/router.addr"
      return 0
    fi
    die "cluster $cfg_name is running with a different config; run 'deploy/cluster.sh down $cfg_file' first"
  fi
  if [ "$state" = partial ]; then
    die "cluster $cfg_name is partly running (some processes died); run 'deploy/cluster.sh down $cfg_file' first"
  fi
  stop_all  # clears stale pid/port files left by processes that are gone
  local role bin
  for role in "${ROLES[@]}" client; do
    bin=$(binary_of "$role")
    [ -x "$bin" ] || die "$bin is not built (cmake -S . -B $cfg_build_dir -G Ninja && ninja -C $cfg_build_dir tandem-router tandem-prefill tandem-decode tandem)"
  done
  verify_flags
  resolve_model
  # Whatever goes wrong from here on, leave nothing half-started behind.
  trap 'log "up failed; stopping what was started"; stop_all' EXIT
  trap 'exit 130' INT TERM
  [ "$cfg_tls" = 0 ] || make_certificates

  log "starting ${#inst_names[@]} nodes of cluster $cfg_name (logs in $run_dir)"
  local i name args
  for i in "${!inst_names[@]}"; do
    command_of "$i"
    start_instance "${inst_names[$i]}" "${args[@]}"
  done
  log "waiting for the nodes to load the model (up to ${cfg_startup_timeout_s}s)"
  wait_ready "${inst_names[@]}"

  local prefill_list="" decode_list="" addr
  for i in "${!inst_names[@]}"; do
    addr=$(node_address "$i")
    if [ "${inst_roles[$i]}" = prefill ]; then prefill_list+=${prefill_list:+,}$addr; fi
    if [ "${inst_roles[$i]}" = decode ]; then decode_list+=${decode_list:+,}$addr; fi
  done
  log "starting the router (prefill $prefill_list; decode $decode_list)"
  command_of router "$prefill_list" "$decode_list"
  start_instance router "${args[@]}"
  wait_ready router
  local router_addr
  router_addr=$(address_of router "$(flag_value listen 127.0.0.1:0 "$router_flags")" \
    "$(<"$run_dir/router.port")")

  log "waiting for the router to report every node healthy"
  local deadline=$((SECONDS + cfg_startup_timeout_s))
  last_fleet=""
  until fleet_healthy "$router_addr"; do
    instance_alive router || fail_instance router "exited"
    for name in "${inst_names[@]}"; do
      instance_alive "$name" || fail_instance "$name" "exited"
    done
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "error: router $router_addr does not report every node healthy after ${cfg_startup_timeout_s}s:"
      indent <<<"$last_fleet" >&2
      fail_instance router "still waiting for healthy nodes"
    fi
    sleep 0.2
  done
  trap - EXIT INT TERM
  cp "$cfg_file" "$run_dir/cluster.conf"
  echo "$router_addr" >"$run_dir/router.addr"
  if [ -s "$run_dir/router.http_port" ]; then
    echo "$(router_scheme)://$(address_of router "$(flag_value http_listen 127.0.0.1:0 "$router_flags")" \
      "$(<"$run_dir/router.http_port")")/v1" >"$run_dir/openai.url"
  fi
  indent <<<"$last_fleet" >&2
  log "cluster $cfg_name is up; router at $router_addr"
  print_openai_url
  echo "$router_addr"
}

# The OpenAI API line of `up` and `status` (nothing when the router serves no HTTP).
print_openai_url() {
  [ ! -s "$run_dir/openai.url" ] || echo "openai api at $(<"$run_dir/openai.url")"
}

cmd_down() {
  if [ ! -d "$run_dir" ]; then
    log "cluster $cfg_name is not running"
    return 0
  fi
  lock_run_dir
  if [ "$(cluster_state)" = down ]; then
    stop_all  # removes stale files, if any
    log "cluster $cfg_name is not running"
    return 0
  fi
  stop_all
  log "cluster $cfg_name stopped ($stopped_count processes); logs kept in $run_dir"
}

cmd_status() {
  local state name url
  state=$(cluster_state)
  if [ "$state" = down ]; then
    echo "cluster $cfg_name is down"
    return 3
  fi
  echo "cluster $cfg_name is $state (run dir $run_dir)"
  for name in $(all_instances); do
    if instance_alive "$name"; then
      url=$(metrics_url "$name")
      echo "  $name: pid $(instance_pid "$name"), port $(cat "$run_dir/$name.port" 2>/dev/null || echo '-')${url:+, metrics $url}"
    else
      echo "  $name: not running (log: $run_dir/$name.log)"
    fi
  done
  if instance_alive router; then print_openai_url; fi
  if instance_alive router && [ -s "$run_dir/router.addr" ]; then
    local client_tls
    client_tls_args
    "$(binary_of client)" status --router "$(<"$run_dir/router.addr")" --timeout_ms=5000 \
      "${client_tls[@]}" || return 1
  fi
  [ "$state" = running ]
}

[ $# -eq 2 ] || usage
command=$1
parse_config "$2"
case "$command" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  check) cmd_check ;;
  *) usage ;;
esac
