#!/bin/bash
R=$PWD; mkdir -p /tmp/td && tar -C /tmp/td -xJf dist/tiledist-bundle.tar.xz && cd /tmp/td/tiledist
export TILEDIST_CACHE_DIR=/tmp/tdc NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TILEDIST_TEST_GPU=1 TILEDIST_WAIT_TIMEOUT=60
t0=$(date +%s)
step() { local name=$1 lim=$2; shift 2; local s=$(date +%s); timeout $lim "$@" > $OUT/$name.log 2>&1; echo "== $name rc=$? $(( $(date +%s)-s ))s"; }
for n in 1 2 3; do
  step ep$n 150 tools/tiledist-run -n $n --timeout 145 tests/cuda_collectives_test --gtest_filter='GpuKernels.Ep*'
  grep -E '^\[[0-9]\] \[  (PASSED|FAILED|SKIPPED) |Failure|rror' $OUT/ep$n.log | head -8
done
left=$(( 560 - ($(date +%s)-t0) ))
[ $left -gt 60 ] && step stress $left tools/tiledist-stress --target cuda --ranks 1,2,3 --seconds $((left-40))
grep -E "ep dispatch|fail|FAIL" $OUT/stress.log | head -5; tail -1 $OUT/stress.log
