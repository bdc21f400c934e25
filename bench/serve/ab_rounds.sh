# shellcheck shell=bash
# shellcheck disable=SC2154  # model, build, bench, out, prompt_len, output_len, requests: set by the caller
# Sourced by the A/B serving benches (kv_digest_ttft.sh, pipelined_ttft.sh), not run on its own:
# alternating tandem-bench runs through two routers, one request at a time, so that load drift on
# the machine hits both sides alike.
#
# Expects: $model, $build, $bench (tandem-bench), $out (output folder), $prompt_len, $output_len, $requests, and
# a `log` and a `die` function.
#
#   ab_rounds ROUNDS SEED_BASE NAME_A ADDRESS_A NAME_B ADDRESS_B
#       round r (1..ROUNDS, seed SEED_BASE + r, the same prompts for both sides) runs NAME_A_r then
#       NAME_B_r when r is odd, the other way round when it is even; each run writes
#       $out/NAME_r.json (tandem-bench's report) and $out/NAME_r.txt, and the load before it to
#       $out/load.txt.

# ab_check_inputs: dies unless $model and the binaries the A/B benches start ($bench and the
# router, prefill and decode nodes under $build) are there.
ab_check_inputs() {
  local b
  [ -f "$model" ] || die "model $model not found (deploy/fetch-model.sh fetches SmolLM2)"
  for b in "$bench" "$build/router/tandem-router" "$build/prefill_node/tandem-prefill" \
           "$build/decode_node/tandem-decode"; do
    [ -x "$b" ] || die "$b is missing: build it (ninja -C build tandem-bench tandem-router tandem-prefill tandem-decode)"
  done
}

ab_note_load() {
  { echo "== $1 $(date -u +%H:%M:%S) loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
    ps -eo pcpu=,comm= --sort=-pcpu | head -4; } >> "$out/load.txt"
}

# ab_run NAME ADDRESS SEED: one tandem-bench run through the router at ADDRESS.
ab_run() {
  log "run $1"
  ab_note_load "$1"
  "$bench" --backend=grpc --address="$2" --token_id_range=100:10000 --seed="$3" \
    --prompt_len="fixed:$prompt_len" --output_len="fixed:$output_len" --concurrency=1 \
    --num_requests="$requests" --warmup_requests=1 --request_timeout_s=600 \
    --json_out="$out/$1.json" --result_prefix="$1_" > "$out/$1.txt" 2>&1 ||
    { cat "$out/$1.txt" >&2; die "run $1 failed"; }
}

ab_rounds() {
  local rounds=$1 seed_base=$2 a=$3 a_address=$4 b=$5 b_address=$6 r seed
  for r in $(seq 1 "$rounds"); do
    seed=$((seed_base + r))
    if [ $((r % 2)) = 1 ]; then
      ab_run "${a}_r$r" "$a_address" "$seed"; ab_run "${b}_r$r" "$b_address" "$seed"
    else
      ab_run "${b}_r$r" "$b_address" "$seed"; ab_run "${a}_r$r" "$a_address" "$seed"
    fi
  done
}
