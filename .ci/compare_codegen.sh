#!/bin/bash
# The code two builds emit for every registered kernel, compared byte for byte: what a
# refactoring that should change no output (issue 25) runs before it lands.
#   .ci/compare_codegen.sh BUILD_A BUILD_B
# Each kernel, for host, sm_80, sm_90a (every lowering), gfx942 and gfx90a, through each build's
# tiledist-compile --emit asm (exit status included). Prints the ones that differ; fails if any.
set -u
A=$1 B=$2
export TILEDIST_CACHE_DIR=$(mktemp -d)
trap 'rm -rf "$TILEDIST_CACHE_DIR"' EXIT
n=0 d=0
for k in $("$B/tools/tiledist-compile" --list | cut -d' ' -f1); do
  for tgt in host sm_80 sm_90a gfx942 gfx90a; do
    for l in "" gpu_ir gpu_ir_mma gpu_ir_prefetch gpu_ir_tma; do
      [ -n "$l" ] && [ "$tgt" = host ] && continue
      case $l in gpu_ir_mma|gpu_ir_prefetch|gpu_ir_tma) [ "$tgt" = sm_90a ] || continue ;; esac
      args="$k --target $tgt --emit asm${l:+ --lowering $l}"
      a=$("$A/tools/tiledist-compile" $args 2>&1; echo "rc=$?")
      b=$("$B/tools/tiledist-compile" $args 2>&1; echo "rc=$?")
      n=$((n + 1))
      if [ "$a" != "$b" ]; then d=$((d + 1)); echo "differs: tiledist-compile $args"; fi
    done
  done
done
echo "$n compiles compared, $d differ"
[ "$d" -eq 0 ]
