#!/bin/sh
# ptxas.sm_90a.overlapped_gemms (tests/CMakeLists.txt): the overlapped GEMMs at the library's
# Hopper tiles, in every form the GPU passes give them, assemble without C7518.
#   sh ptxas_overlapped_gemms.sh TILEDIST_COMPILE PTXAS
compile=$1 ptxas=$2
[ -x "$ptxas" ] || { echo 'SKIPPED: no ptxas'; exit 77; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
for k in "ag_gemm" "ag_gemm --const PUTS=8" "gemm_rs" "gemm_ar --const ALL=1"; do
  for f in "--lowering gpu_ir_tma" "--lowering gpu_ir --warp-specialize"; do
    for p in 0 1; do
      what="$k $f PERSISTENT=$p"
      # shellcheck disable=SC2086
      "$compile" $k --target sm_90a --const BM=128 --const BN=256 --const BK=64 --num-warps 8 --num-stages 4 \
        --aligned all --const PERSISTENT=$p $f --emit asm > "$d/k.ptx" || { echo "cannot compile $what"; exit 1; }
      "$ptxas" -v -arch=sm_90a "$d/k.ptx" -o "$d/k.cubin" > "$d/k.log" 2>&1 || { cat "$d/k.log"; echo "ptxas rejects $what"; exit 1; }
      if grep C7518 "$d/k.log"; then echo "ptxas serializes the wgmma of $what"; exit 1; fi
    done
  done
done
echo "4 forms of 4 kernels: no C7518"
