#!/usr/bin/env bash
# Prints one line naming this machine's CPU and the instruction-set path Tandem's CPU kernels
# take, for the head of every CPU benchmark record (figures differ between machines and ISAs,
# so a record without them cannot be compared):
#
#   cpu: AMD EPYC 9R14 (2 cores) isa: avx512 (avx512f avx512bw avx512vl avx2 fma f16c)
#   cpu: ... isa: avx2 FORCED by TANDEM_CPU_ISA=avx2 (this CPU has avx512)
#
# The path rule is attention/cpu/cpu_isa.h's: AVX-512 needs F, BW and VL (with AVX2, FMA, F16C);
# AVX2 needs FMA and F16C; TANDEM_CPU_ISA forces a narrower path for the whole process.
set -euo pipefail
model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
flags=" $(awk -F': ' '/^flags/ { print $2; exit }' /proc/cpuinfo) "
has() { for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
detected=portable
if has avx2 fma f16c; then detected=avx2; fi
if has avx2 fma f16c avx512f avx512bw avx512vl; then detected=avx512; fi
present=""
for f in avx512f avx512bw avx512vl avx512_vnni avx2 fma f16c; do
  if has "$f"; then present+="${present:+ }$f"; fi
done
line="cpu: ${model:-unknown} ($(nproc) cores) isa: "
forced="${TANDEM_CPU_ISA:-}"
if [[ -n "$forced" && "$forced" != "$detected" ]]; then
  line+="$forced FORCED by TANDEM_CPU_ISA=$forced (this CPU has $detected: $present)"
else
  line+="$detected ($present)"
fi
echo "$line"
