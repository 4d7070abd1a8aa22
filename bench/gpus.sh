#!/usr/bin/env bash
# The multi-GPU acceptance runs of issues 5, 6 and 34, on the GPUs of one host, from `make bundle`'s
# tarball (dist/tiledist-bundle.tar.xz, built elsewhere: nothing is built here).
#
#   bash bench/gpus.sh N [STAGE...]     (from the repository root; N ranks, one per GPU)
#
# Stages (default: all, in this order; each under its own time limit, logs in $OUT or /tmp):
#   tests        cuda_dist_test and cuda_collectives_test on N ranks, then the fault tests (a wait
#                that never completes)
#   collectives  collectives_bench: ours against NCCL, f32 and bf16
#   gemms        overlapped_gemm_bench: AllGather+GEMM, GEMM+ReduceScatter, GEMM+AllReduce
#                against our GEMM then NCCL, and cuBLAS then NCCL
#   torch        bench/torch_baseline.py: NCCL and PyTorch's fused symmetric-memory ops
#   moe-ep-tests the MoE kernels' and the expert all-to-all's GPU tests alone, then the fault
#                tests (issue 34's first step, shorter than `tests`)
#   moe          moe_bench dist: the tensor-parallel MoE MLP (all-gather under the gate/up grouped
#                GEMM, reduce-scatter under the down one) against PyTorch's NCCL layer and against
#                our kernels one after the other
#   ep           ep_bench: expert-parallel dispatch and combine (low latency f8 and bf16, normal at
#                128 and 4096 tokens a rank) against NCCL's all-to-all of the same bytes
#   nvshmem-tests  the GPU world on NVSHMEM's heap ($TILEDIST_WORLD=nvshmem, issue 31): its
#                bootstrap alone (stream_test Nvshmem.*), then cuda_dist_test on N ranks, the
#                fault tests, and cuda_collectives_test (the longest: every kernel compiled with
#                NVSHMEM's device library)
#   nvshmem-bench  collectives_bench on the NVSHMEM world (the `collectives` stage is the same on
#                the CUDA world: run both in one call to compare them; issue 35)
#   sp-tests     the sequence-parallel attention's GPU tests alone (AgAttention, UlyssesAttention)
#   examples     the examples (examples/, built by find_package against the installed tree),
#                each given `cuda` (vector_add, softmax and library then run on the GPUs;
#                all_gather runs on the CPU backend's world), as its RANKS processes where it has
#                them (issue 30)
#   sp           sp_attention_bench: AgAttention and UlyssesAttention against NCCL's all-gather of
#                the keys and values then SDPA (issue 29)
# Prints each stage's summary lines; the logs keep the rest. N may exceed the GPUs found: ranks
# then share GPUs (local rank modulo the count), which tests the protocols but times nothing, so
# only the tests stage runs (NCCL refuses two ranks on one GPU).
set -u
n=${1:?usage: bash bench/gpus.sh N [tests|moe-ep-tests|sp-tests|examples|nvshmem-tests|nvshmem-bench|collectives|gemms|torch|moe|ep|sp ...]}
shift
stages=${*:-tests collectives gemms torch moe ep}
root=$(pwd)
logs=${OUT:-/tmp/gpus-logs}
mkdir -p "$logs" /tmp/td
[ -x /tmp/td/tiledist/tools/tiledist-run ] || tar -C /tmp/td -xJf dist/tiledist-bundle.tar.xz || exit 1
cd /tmp/td/tiledist || exit 1
export TILEDIST_CACHE_DIR=/tmp/tiledist-cache NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TILEDIST_TEST_GPU=1
export TILEDIST_NCCL=${TILEDIST_NCCL:-$(ls /usr/lib/x86_64-linux-gnu/libnccl.so.2 2>/dev/null || find / -name 'libnccl.so.2*' 2>/dev/null | head -1)}
export TILEDIST_CUBLASLT=${TILEDIST_CUBLASLT:-$(find / -name 'libcublasLt.so.1[23]*' 2>/dev/null | head -1)}
nvidia-smi --query-gpu=index,name,power.limit --format=csv,noheader | head -"$n"
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
run() {  # run NAME SECONDS CMD...: the command under a limit, its rc on a line of its own
  local name=$1 limit=$2
  shift 2
  echo "== $name"
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
  echo "   rc=$?  (log: $logs/$name.log)"
}
faults() {  # faults [TAG]: the fault tests (a wait that never completes), each in a process of its
           # own (a trapped kernel leaves its context unusable); TAG names their logs
  for t in AWaitThatNeverCompletesNamesKernelRankAndSignal AWaitOnAStreamIsReportedByTheStreamsSynchronize \
    AnExpertAllToAllPeerThatNeverSendsIsNamed; do
    TILEDIST_WAIT_TIMEOUT=2 run "${1:-}fault-$t" 120 ./tools/tiledist-run -n "$n" --timeout 110 ./tests/cuda_dist_test --gtest_filter="GpuFaults.$t"
    grep -E "^\[0\] \[  (PASSED|FAILED)|tiledist:" "$logs/${1:-}fault-$t.log" | head -3
  done
}
for stage in $stages; do
  if [ "${stage%tests}" = "$stage" ] && [ "$stage" != examples ] && [ "$n" -gt "$gpus" ]; then
    echo "== $stage: skipped ($n ranks on $gpus GPUs share them: no timings)"
    continue
  fi
  case $stage in
    moe-ep-tests)
      TILEDIST_WAIT_TIMEOUT=30 run moe-ep-tests 300 ./tools/tiledist-run -n "$n" --timeout 290 ./tests/cuda_collectives_test --gtest_filter='GpuKernels.Ep*:GpuKernels.*Moe*'
      grep -E "^\[0\] \[  (PASSED|FAILED)|Failure" "$logs/moe-ep-tests.log" | head -10
      faults ;;
    moe)
      TILEDIST_GPU_HEAP_SIZE=4G TILEDIST_MOE_BASELINE="$root/bench/moe_baseline.py" run moe 400 ./tools/tiledist-run -n "$n" --timeout 390 ./bench/moe_bench 20 dist
      grep -E "^\[0\] " "$logs/moe.log" | cut -c5-220 | grep -vE "^\s*$" | tail -20 ;;
    ep)
      TILEDIST_GPU_HEAP_SIZE=4G TILEDIST_EP_BASELINE="$root/bench/ep_baseline.py" run ep 400 ./tools/tiledist-run -n "$n" --timeout 390 ./bench/ep_bench 20
      grep -E "^\[0\] " "$logs/ep.log" | cut -c5-220 | grep -vE "^\s*$" | tail -12 ;;
    examples)
      for ex in examples/*; do
        case $ex in *.ranks) continue ;; esac
        if [ -f "$ex.ranks" ]; then
          run "example-${ex##*/}" 300 ./tools/tiledist-run -n "$(cat "$ex.ranks")" --timeout 290 "$ex" cuda
        else
          run "example-${ex##*/}" 300 "$ex" cuda
        fi
        tail -4 "$logs/example-${ex##*/}.log"
      done ;;
    nvshmem-tests)
      TILEDIST_WORLD=nvshmem run nvshmem-alone 120 ./tests/stream_test --gtest_filter='Nvshmem.*'
      grep -E "\[  (PASSED|FAILED|SKIPPED)|Failure|tiledist:" "$logs/nvshmem-alone.log" | head -10
      TILEDIST_WORLD=nvshmem TILEDIST_WAIT_TIMEOUT=30 run nvshmem-dist 300 ./tools/tiledist-run -n "$n" --timeout 290 ./tests/cuda_dist_test --gtest_filter=-GpuFaults.*
      grep -E "^\[0\] \[  (PASSED|FAILED)|Failure|tiledist:" "$logs/nvshmem-dist.log" | head -10
      TILEDIST_WORLD=nvshmem faults nvshmem-
      TILEDIST_WORLD=nvshmem TILEDIST_WAIT_TIMEOUT=30 run nvshmem-collectives 400 ./tools/tiledist-run -n "$n" --timeout 390 ./tests/cuda_collectives_test
      grep -E "^\[0\] \[  (PASSED|FAILED)|Failure|tiledist:" "$logs/nvshmem-collectives.log" | head -10 ;;
    nvshmem-bench)
      TILEDIST_WORLD=nvshmem run nvshmem-collectives-bench 400 ./tools/tiledist-run -n "$n" --timeout 390 ./bench/collectives_bench
      grep -E "^\[0\] " "$logs/nvshmem-collectives-bench.log" | cut -c5-200 | grep -vE "^\s*$" | tail -40 ;;
    sp-tests)
      TILEDIST_WAIT_TIMEOUT=30 run sp-tests 300 ./tools/tiledist-run -n "$n" --timeout 290 ./tests/cuda_collectives_test --gtest_filter='GpuKernels.AgAttention:GpuKernels.UlyssesAttention'
      grep -E "^\[0\] \[  (PASSED|FAILED)|Failure" "$logs/sp-tests.log" | head -10 ;;
    sp)
      TILEDIST_GPU_HEAP_SIZE=8G TILEDIST_SP_BASELINE="$root/bench/sp_attention_baseline.py" run sp 500 ./tools/tiledist-run -n "$n" --timeout 490 ./bench/sp_attention_bench 10
      grep -E "^\[0\] " "$logs/sp.log" | cut -c5-220 | grep -vE "^\s*$" | tail -16 ;;
    tests)
      TILEDIST_WAIT_TIMEOUT=30 run dist 300 ./tools/tiledist-run -n "$n" --timeout 290 ./tests/cuda_dist_test --gtest_filter=-GpuFaults.*
      grep -E "^\[0\] \[  (PASSED|FAILED)|Failure" "$logs/dist.log" | head -10
      TILEDIST_WAIT_TIMEOUT=30 run collectives-tests 300 ./tools/tiledist-run -n "$n" --timeout 290 ./tests/cuda_collectives_test
      grep -E "^\[0\] \[  (PASSED|FAILED)|Failure" "$logs/collectives-tests.log" | head -10
      faults ;;
    collectives)
      run collectives 400 ./tools/tiledist-run -n "$n" --timeout 390 ./bench/collectives_bench
      grep -E "^\[0\] " "$logs/collectives.log" | cut -c5-200 | grep -vE "^\s*$" | tail -40 ;;
    gemms)
      TILEDIST_GPU_HEAP_SIZE=3G run gemms 400 ./tools/tiledist-run -n "$n" --timeout 390 ./bench/overlapped_gemm_bench
      grep -E "^\[0\] " "$logs/gemms.log" | cut -c5-200 | grep -vE "^\s*$" | tail -30 ;;
    torch)
      run torch 300 /opt/torch/.venv/bin/torchrun --nproc-per-node "$n" "$root/bench/torch_baseline.py"
      grep -vE "^(W|I)[0-9]{4}|Warning|warn" "$logs/torch.log" | tail -20 ;;
    *) echo "gpus.sh: no stage '$stage' (tests, moe-ep-tests, sp-tests, examples, nvshmem-tests, nvshmem-bench, collectives, gemms, torch, moe, ep, sp)"; exit 2 ;;
  esac
done
