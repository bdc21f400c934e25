#!/usr/bin/env bash
# Runs a test binary with TANDEM_CPU_ISA forcing one of the CPU kernel paths
# (attention/cpu/cpu_isa.h), so that an AVX-512 machine exercises the AVX2 and portable paths
# through whole forward passes too, not only the kernel tests that pin each path. Exits 77
# (ctest: skipped, and says why) when this CPU cannot run the path.
#
#   tests/forced_isa.sh avx2|portable BINARY [ARGS...]
set -euo pipefail
isa=$1; shift
flags=" $(awk -F': ' '/^flags/ { print $2; exit }' /proc/cpuinfo) "
need=()
case "$isa" in
  avx2) need=(avx2 fma f16c) ;;
  portable) ;;
  *) echo "forced_isa.sh: unknown path '$isa' (avx2 or portable)" >&2; exit 2 ;;
esac
for f in "${need[@]}"; do
  if [[ "$flags" != *" $f "* ]]; then
    echo "forced_isa.sh: SKIPPED: this CPU lacks $f, so it cannot run the $isa path"
    exit 77
  fi
done
echo "forced_isa.sh: TANDEM_CPU_ISA=$isa $*"
TANDEM_CPU_ISA=$isa exec "$@"
