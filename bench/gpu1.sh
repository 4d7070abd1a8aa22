#!/usr/bin/env bash
# Issue 24's single-GPU runs, from `make bundle`'s tarball (dist/tiledist-bundle.tar.xz, built
# elsewhere: nothing is built here), in the repository root of a GPU machine:
#
#   bash bench/gpu1.sh [STAGE...]
#
# Stages (default: all, in this order; each under its own time limit, logs in $OUT or /tmp):
#   tests      kernels_test on the GPU (every kernel test; the grouped GEMM's again with TMA off)
#   attention  attention_bench: kernels::Attention against PyTorch SDPA, same run
#   decode     the flash-decoding tests (FlashDecode.*, and DistFlashDecode on 1 and 2 ranks sharing
#              the GPU), then decode_bench: kernels::FlashDecode against SDPA's decode step, and its
#              KV reads' bandwidth against a device copy's
#   grouped    grouped_gemm_bench: kernels::GroupedGemm against torch._grouped_mm, same run (and
#              its e4m3 forms alone)
#   moe        the MoE kernels: routing's and SwiGLU's tests, AgMoe / MoeReduce / MoeMlp (bf16 and e4m3)
#              on 1 and 2 ranks sharing the GPU, then moe_bench (routing, the MoE MLP, the up and the
#              down projection alone, against PyTorch in the same run), moe_bench dist at one rank
#              (beside PyTorch and the overlap off), then GPU stress (a replayed seed, 150 s)
#   grouped8   the e4m3 grouped GEMM's rows alone: by default and warp specialized (TILEDIST_WS=1)
#   gemm       gemm_bench tp and fp8: the library GEMMs against cuBLAS (no-regression check)
#   gpuir      every kernel test through the GPU IR lowering (TILEDIST_LOWERING=gpu_ir: on Hopper
#              its wgmma form), then attention's registers and spills (ptxas -v) and times at a few
#              tile shapes
#   tiles      attention at other tiles, D = 128 and 64, plain and with dot_prefetch (one line each)
#   mma        attention_bench through the GPU IR lowering in sm_89's form (gpu_ir_mma), to compare
#   prefetch   with the dot_prefetch pass (gpu_ir_prefetch): the attention and two-dot tests, then
#              attention_bench against SDPA
#   tma        with TMA copies in the GPU IR pipeline (gpu_ir_tma): the attention, grouped GEMM and
#              two-dot tests, then attention_bench and grouped_gemm_bench (through the GPU IR)
#   ws         the same warp specialized (gpu_ir_ws: a producer warpgroup issues the TMA copies)
#   gemmws     the GEMM tests, then gemm_bench tp, through the GPU passes warp specialized (gpu_ir_ws:
#              the library GEMM's persistent tile loop in the warp_specialization pass)
#   fp8        the f8 GEMM tests and `gemm_bench fp8` by the library's default, then through the GPU
#              passes (TILEDIST_LOWERING=gpu_ir: f8 wgmma in the GPU IR lowering)
#   skinny     the skinny GEMM (M=128, N=K=8192) as the library configures it, against cuBLAS, three
#              times (gemm_bench skinny), then its tiles (64x128x64, 4 warps) by each lowering and
#              stage count (gemm_bench gemm: TFLOP/s, no baseline)
#   all        elementwise_bench (bandwidth-bound kernels against the copy engine), then gemm_bench
#              (GEMM tiles, TP shapes, the skinny and f8 GEMMs)
#   policy     what the default on Hopper could be, per lowering (gpu_ir: cp.async, gpu_ir_tma:
#              TMA issued by the math warps, gpu_ir_ws: a producer warpgroup): gemm_bench sustain
#              (ours then cuBLAS, one second each, twice) on a GEMM compiled as a user compiles it
#              (no library configuration) at 8192^3 and 4096^3, 128x256x64/8w/4s and
#              128x128x64/4w/4s, and attention_bench one at D = 64 and 128 (128x64/8w/3s)
#   gemmtiles  a GEMM compiled as a user compiles it at other tiles than the library's (128x128x64 on
#              one warpgroup, 256x128x64 on two: wgmma repeated over the rows): gemm_bench sustain
#              against cuBLAS
#   sm80       sm_80's code on this GPU (TILEDIST_TARGET=sm_80: mma.sync, cp.async, no TMA):
#              kernels_test, then gemm_bench tp
#   model      issue 32's model: the GPU tests of its layers (prefill, KV cache, decode; dense and
#              MoE) at 1 and 2 ranks sharing the GPU, then model_bench against PyTorch's same
#              layers (bench/model_baseline.py): Qwen3-32B prefill at 1k/4k/16k and decode at
#              batch 1/16/128, Qwen3-30B-A3B prefill at 4k and decode at 16/128, and at 2 ranks
#              sharing the GPU (compared with one PyTorch process), then the model in the stress
#              harness (tiledist-stress, TILEDIST_STRESS_SUBJECT=model) on 1-2 ranks for 2 minutes
#   mega       issue 33's mega kernel: its tests on the GPU (mega_test: task graphs as one
#              persistent kernel against the kernels one by one; the model's decode steps as one
#              at 1 and 2 ranks sharing the GPU), then the stress subject `mega` on 1-2 ranks
#              sharing the GPU for a minute
#   split      a decode step's GEMMs with K split where their tiles are fewer than the SMs (gemm_config,
#              M <= 64): GEMM + AllReduce's and the dense decode's tests (one rank), then the Qwen3-8B-shaped
#              step at batch 1: as a graph, as one persistent kernel fetching its weights into L2 ahead
#              and not ($TILEDIST_MEGA_PREFETCH=0), and as a graph with whole tiles ($TILEDIST_DECODE_SPLIT=0)
#   quick      issue 33 in one call, for a session that may get only one: the block wait's and the
#              split GEMMs' GPU tests, the Qwen3-8B-shaped step at batch 1 as one persistent kernel
#              (ptxas -v of it), its profile (tiledist-trace summary), then model_bench at batch 1
#              (kernel by kernel, graph, persistent, PyTorch)
#   megaprof   issue 33's profile: one persistent step of the Qwen3-8B-shaped model at batch 1 and 8
#              (TILEDIST_PROFILE), summarized by tiledist-trace (time a tile of each kernel, waits)
#   megabench  issue 33's timing: model_bench's decode of a Qwen3-8B-shaped model (bench/qwen3-8b.json,
#              36 layers) at batch 1 and 8 (megabench32: 32): kernel by kernel, a CUDA graph, one
#              persistent kernel, and PyTorch eager and in a CUDA graph, in one run
#   megatune   issue 33's open questions, one line each (tiledist-model, the same Qwen3-8B-shaped
#              model, batch 1): the graph, then one persistent kernel at its default warps (the
#              most a task asks: 8), at 4 and at 16, and with 64-column decode GEMM tiles
#   worlds     issue 31 after the rendezvous: cuda_dist_test at 2 ranks sharing the GPU and a
#              fault, on the CUDA world, then cuda_dist_test at 2 ranks on the NVSHMEM world
#   nvcoll     cuda_collectives_test at 2 ranks on the NVSHMEM world (its tests take 2-29 s each
#              there: a call of its own)
# Prints each stage's summary; the logs keep the rest.
set -u
stages=${*:-tests attention grouped gemm gpuir}
root=$(pwd)
logs=${OUT:-/tmp/gpu1-logs}
mkdir -p "$logs" /tmp/td
[ -x /tmp/td/tiledist/tests/kernels_test ] || tar -C /tmp/td -xJf dist/tiledist-bundle.tar.xz || exit 1
cd /tmp/td/tiledist || exit 1
export TILEDIST_CACHE_DIR=/tmp/tiledist-cache TILEDIST_TEST_GPU=1
export TILEDIST_ATTENTION_BASELINE=$root/bench/attention_baseline.py
export TILEDIST_GROUPED_GEMM_BASELINE=$root/bench/grouped_gemm_baseline.py
export TILEDIST_MOE_BASELINE=$root/bench/moe_baseline.py
export TILEDIST_MODEL_BASELINE=$root/bench/model_baseline.py
export TILEDIST_CUBLASLT=${TILEDIST_CUBLASLT:-$(find / -name 'libcublasLt.so.1[23]*' 2>/dev/null | head -1)}
# Everything printed also goes to $logs/summary.txt, which survives a run cut off by its time limit.
exec > >(tee -a "$logs/summary.txt") 2>&1
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader
ptxinfo() {  # ptxinfo DIR NAME: ptxas -v of the cached PTX (jit/cache.cpp: after the header's blank line) of kernels NAME*
  local px; px=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
  for f in $(grep -l -a "^kernel $2" "$1"/* 2>/dev/null | head -2); do
    awk 'f{print} /^$/{f=1}' "$f" > /tmp/ptxinfo.ptx
    echo "   $(grep -a -m1 '^kernel ' "$f"): $("$px" -v -arch=sm_90a /tmp/ptxinfo.ptx -o /tmp/ptxinfo.cubin 2>&1 |
      grep -oE '(Used [0-9]+ registers|[0-9]+ bytes (spill stores|spill loads|smem|stack frame))' | tr '\n' ' ')"
  done
}
issue33_tests() {  # issue33_tests PREFIX S1 S2: the split GEMMs' GPU tests (S1 s), the block wait's at 2 ranks (S2 s)
  run "$1_tests" $(($2 + 5)) tools/tiledist-run -n 1 --timeout "$2" tests/cuda_collectives_test \
    --gtest_filter='GpuKernels.GemmAll*:GpuKernels.DenseDecode*'
  grep -E "^\[0\] \[  (PASSED|FAILED)|Failure" "$logs/$1_tests.log" | head -6
  run "$1_wait" $(($3 + 5)) tools/tiledist-run -n 2 --timeout "$3" tests/cuda_dist_test \
    --gtest_filter='GpuKernels.AWaitOnABlock*'
  grep -E "^\[.\] \[  (PASSED|FAILED)|Failure" "$logs/$1_wait.log" | head -4
}
run() {  # run NAME SECONDS CMD...: the command under a limit, its rc and its last lines
  local name=$1 limit=$2
  shift 2
  echo "== $name"
  timeout "$limit" "$@" > "$logs/$name.log" 2>&1
  echo "   rc=$?  (log: $logs/$name.log)"
}
sustain() {  # sustain M N K BM BN BK WARPS STAGES: ours and cuBLAS, a second each, the second round's TFLOP/s
  timeout 60 bench/gemm_bench sustain "$@" 1 2>&1 | tail -2 | grep -oE '(ours|cuBLAS) .*TFLOP/s' |
    sed 's/ [0-9.]*\.\.[0-9.]* / /' | tr '\n' ' '
}
for stage in $stages; do
  case $stage in
    tests)
      run tests 400 tests/kernels_test
      grep -E '^\[  (PASSED|FAILED) ' "$logs/tests.log"
      TILEDIST_TMA=0 run tests_no_tma 200 tests/kernels_test --gtest_filter='GroupedGemm*'
      grep -E '^\[  (PASSED|FAILED) ' "$logs/tests_no_tma.log" ;;
    attention)
      run attention 240 bench/attention_bench 20
      grep -vE '^\s*$' "$logs/attention.log" | tail -14 ;;
    decode)
      run decode-tests 240 tests/kernels_test --gtest_filter='FlashDecode.*'
      grep -E "^\[  (PASSED|FAILED)|Failure" "$logs/decode-tests.log" | head -6
      for n in 1 2; do
        run "decode-dist$n" 240 tools/tiledist-run -n $n --timeout 230 tests/cuda_collectives_test --gtest_filter='GpuKernels.DistFlashDecode'
        grep -E "^\[0\] \[  (PASSED|FAILED)|Failure" "$logs/decode-dist$n.log" | head -4
      done
      run decode 300 bench/decode_bench 20
      grep -vE '^\s*$' "$logs/decode.log" | tail -9 ;;
    grouped)
      run grouped 240 bench/grouped_gemm_bench 20
      grep -vE '^\s*$' "$logs/grouped.log" | tail -12 ;;
    moe)
      run moe_tests 300 tests/kernels_test --gtest_filter='MoeRouting*:MoeSwiglu*'
      grep -E '^\[  (PASSED|FAILED) ' "$logs/moe_tests.log"
      for n in 1 2; do
        TILEDIST_WAIT_TIMEOUT=60 run "moe_ranks$n" 300 tools/tiledist-run -n $n --timeout 290 tests/cuda_collectives_test \
          --gtest_filter='GpuKernels.AllGatherMoe*:GpuKernels.MoeReduce*:GpuKernels.MoeMlp*'
        grep -E '^\[0\] \[  (PASSED|FAILED) ' "$logs/moe_ranks$n.log"
      done
      run moe_bench 500 stdbuf -oL bench/moe_bench 50
      grep -vE '^\s*$' "$logs/moe_bench.log" | tail -30
      run moe_dist 200 tools/tiledist-run -n 1 --timeout 190 stdbuf -oL bench/moe_bench 25 dist
      grep -vE '^\s*$' "$logs/moe_dist.log" | tail -6
      # (the seed a GPU stress job failed on, 2026-11-27, the check's bound since widened; the
      # stress has drawn the overlap since, so later draws of the job differ)
      run moe_replay 120 tools/tiledist-stress --replay 16113677888746116190 --ranks 2 --steps 12 --target cuda
      tail -1 "$logs/moe_replay.log"
      run moe_stress 200 tools/tiledist-stress --target cuda --ranks 1,2,3 --seconds 150
      tail -1 "$logs/moe_stress.log" ;;
    model)
      for n in 1 2; do
        run "model_tests$n" 200 tools/tiledist-run -n $n --timeout 190 tests/cuda_collectives_test \
          --gtest_filter='GpuKernels.Dense*:GpuKernels.MoeModel*'
        grep -E '^\[0\] \[  (PASSED|FAILED) ' "$logs/model_tests$n.log"
      done
      TILEDIST_GPU_HEAP_SIZE=8G run model_dense 300 stdbuf -oL tools/tiledist-run -n 1 --timeout 290 bench/model_bench 5
      grep -vE '^\s*$' "$logs/model_dense.log" | tail -10
      TILEDIST_GPU_HEAP_SIZE=8G run model_moe 200 stdbuf -oL tools/tiledist-run -n 1 --timeout 190 bench/model_bench 5 \
        --config qwen3-30b-a3b --seqlens 4096 --decode-batches 16,128
      grep -vE '^\s*$' "$logs/model_moe.log" | tail -6
      TILEDIST_GPU_HEAP_SIZE=4G run model_shared 200 stdbuf -oL tools/tiledist-run -n 2 --timeout 190 bench/model_bench 3 \
        --seqlens 2048 --decode-batches 16
      grep -vE '^\s*$' "$logs/model_shared.log" | tail -6
      # (the model as the stress harness's subject: prefill and decode steps, graphs, 1-2 ranks)
      TILEDIST_STRESS_SUBJECT=model run model_stress 150 tools/tiledist-stress --target cuda --ranks 1,2 --seconds 120
      tail -3 "$logs/model_stress.log" ;;
    grouped8)
      for l in default ws; do  # (ws: warp specialized, TILEDIST_WS=1)
        [ "$l" = ws ] && w=1 || w=
        TILEDIST_WS=$w run "grouped8_$l" 240 bench/grouped_gemm_bench 10 f8
        echo "   $l:"; grep -E "rowwise|blockwise" "$logs/grouped8_$l.log"
      done ;;
    gemm)
      run gemm 240 bench/gemm_bench tp
      grep -vE '^\s*$' "$logs/gemm.log" | tail -16
      run fp8 180 bench/gemm_bench fp8
      grep -vE '^\s*$' "$logs/fp8.log" | tail -8 ;;
    gpuir)
      TILEDIST_LOWERING=gpu_ir run tests_gpu_ir 400 tests/kernels_test
      grep -E '^\[  (PASSED|FAILED) ' "$logs/tests_gpu_ir.log"
      echo "   BM BN WARPS STAGES | ptxas | B=4 H=32 S=4096 D=128, non-causal"
      for c in "128 64 8 3" "64 64 4 3" "128 32 8 3" "128 128 8 2"; do
        set -- $c
        tools/tiledist-compile attention --target sm_90a --emit asm --const CAUSAL=0 --const VARLEN=0 --const BLOCK_M=$1 \
          --const BLOCK_N=$2 --num-warps $3 --num-stages $4 --lowering gpu_ir > /tmp/td/attention.ptx
        regs=$(/usr/local/cuda/bin/ptxas -arch=sm_90a -v /tmp/td/attention.ptx -o /dev/null 2>&1 |
               grep -oE "Used [0-9]+ registers|[0-9]+ bytes spill stores" | tr '\n' ' ')
        echo "   $c | $regs | $(timeout 60 bench/attention_bench one 4 32 4096 128 0 $1 $2 $3 $4 10 2>&1 | tail -1)"
      done ;;
    tiles)
      echo "   BM BN WARPS STAGES D lowering | B=4 H=32 S=4096, non-causal"
      for l in gpu_ir gpu_ir_prefetch; do
        for c in "128 64 8 3" "128 32 8 3" "64 64 4 3" "64 32 4 3"; do
          for d in 128 64; do
            set -- $c
            echo "   $c $d $l | $(TILEDIST_LOWERING=$l timeout 60 bench/attention_bench one 4 32 4096 $d 0 $1 $2 $3 $4 10 2>&1 | tail -1)"
          done
        done
      done ;;
    mma)
      TILEDIST_LOWERING=gpu_ir_mma run attention_mma 240 bench/attention_bench 20
      grep -vE '^\s*$' "$logs/attention_mma.log" | tail -5 ;;
    prefetch)
      TILEDIST_LOWERING=gpu_ir_prefetch run tests_prefetch 300 tests/kernels_test \
        --gtest_filter='Attention.*:Gemm.Triton*:Gemm.BackToBack*:Gemm.MaskedOperands*:Gemm.BF16'
      grep -E '^\[  (PASSED|FAILED) |FAILED  \]' "$logs/tests_prefetch.log"
      TILEDIST_LOWERING=gpu_ir_prefetch run attention_prefetch 240 bench/attention_bench 20
      grep -vE '^\s*$' "$logs/attention_prefetch.log" | tail -5 ;;
    tma|ws)  # (lowering gpu_ir_tma or gpu_ir_ws; logs tests_tma, attention_ws, ...)
      l=gpu_ir_$stage
      TILEDIST_LOWERING=$l run tests_$stage 300 tests/kernels_test \
        --gtest_filter='Attention.*:GroupedGemm.*:Gemm.Triton*:Gemm.BackToBack*:Gemm.MaskedOperands*:Gemm.BF16'
      grep -E '^\[  (PASSED|FAILED) |FAILED  \]' "$logs/tests_$stage.log"
      TILEDIST_LOWERING=$l run attention_$stage 200 bench/attention_bench 20
      grep -vE '^\s*$' "$logs/attention_$stage.log" | tail -5
      TILEDIST_LOWERING=$l run grouped_$stage 200 bench/grouped_gemm_bench 10
      grep -vE '^\s*$' "$logs/grouped_$stage.log" | tail -5 ;;
    gemmws)
      TILEDIST_LOWERING=gpu_ir_ws run tests_gemmws 300 tests/kernels_test --gtest_filter='Gemm.*'
      grep -E '^\[  (PASSED|FAILED) |FAILED  \]' "$logs/tests_gemmws.log"
      TILEDIST_LOWERING=gpu_ir_ws run gemm_gemmws 240 bench/gemm_bench tp
      grep -vE '^\s*$' "$logs/gemm_gemmws.log" | tail -16 ;;
    fp8)
      run fp8_default 180 bench/gemm_bench fp8
      grep -vE '^\s*$' "$logs/fp8_default.log" | tail -5
      TILEDIST_LOWERING=gpu_ir run tests_fp8_ir 300 tests/kernels_test --gtest_filter='Gemm.*F8*:GroupedGemm.F8*'
      grep -E '^\[  (PASSED|FAILED) |FAILED  \]' "$logs/tests_fp8_ir.log"
      TILEDIST_LOWERING=gpu_ir run fp8_ir 180 bench/gemm_bench fp8
      grep -vE '^\s*$' "$logs/fp8_ir.log" | tail -5 ;;
    skinny)
      timeout 120 bench/gemm_bench skinny 2>&1 | grep -E "skinny|host"
      for l in default gpu_ir gpu_ir_tma gpu_ir_ws; do
        for s in 4 8; do
          [ "$l" = default ] && l=
          echo "   ${l:-default} stages=$s | $(TILEDIST_LOWERING=$l timeout 60 bench/gemm_bench gemm 128 8192 8192 64 128 64 4 $s 2>&1 | tail -1)"
        done
      done ;;
    all)
      run elementwise 60 bench/elementwise_bench
      grep -vE '^\s*$' "$logs/elementwise.log" | tail -5
      run bench_all 300 bench/gemm_bench
      grep -vE '^\s*$' "$logs/bench_all.log" | tail -40 ;;
    policy)
      for l in gpu_ir gpu_ir_tma gpu_ir_ws; do
        for c in "8192 8192 8192 128 256 64 8 4" "4096 4096 4096 128 256 64 8 4" "8192 8192 8192 128 128 64 4 4"; do
          echo "   $l $c | $(TILEDIST_LOWERING=$l sustain $c)"
        done
        for d in 64 128; do
          echo "   $l attention D=$d | $(TILEDIST_LOWERING=$l timeout 60 bench/attention_bench one 4 32 4096 $d 0 128 64 8 3 10 2>&1 | tail -1)"
        done
      done ;;
    gemmtiles)
      for c in "8192 8192 8192 128 128 64 4 4" "4096 4096 4096 128 128 64 4 4" "8192 8192 8192 128 128 64 4 3" \
               "8192 8192 8192 256 128 64 8 3"; do
        echo "   $c | $(sustain $c)"
      done ;;
    sm80)
      TILEDIST_TARGET=sm_80 run tests_sm80 400 tests/kernels_test
      grep -E '^\[  (PASSED|FAILED) |FAILED  \]' "$logs/tests_sm80.log"
      TILEDIST_TARGET=sm_80 run tp_sm80 240 bench/gemm_bench tp
      grep -vE '^\s*$' "$logs/tp_sm80.log" | tail -14 ;;
    mega)
      run mega 200 tests/mega_test
      grep -E "relative|^\[  (PASSED|FAILED)|Failure" "$logs/mega.log" | head -20
      for n in 1 2; do  # (the model's decode steps as one persistent kernel, against the host's reference)
        run "mega_model$n" 200 tools/tiledist-run -n $n --timeout 190 tests/cuda_collectives_test \
          --gtest_filter='GpuKernels.DenseDecodeAsOneKernel'
        grep -E '^\[0\] \[  (PASSED|FAILED) |relative' "$logs/mega_model$n.log" | head -8
      done
      TILEDIST_STRESS_SUBJECT=mega run mega-stress 120 tools/tiledist-stress --target cuda --seconds 60 --ranks 1,2
      tail -2 "$logs/mega-stress.log" ;;
    megatune)
      for v in graph mega mega_w4 mega_w16 mega_bn64; do
        case $v in
          graph) a=() ;; mega) a=(--mega) ;; mega_w4) a=(--mega --warps 4) ;; mega_w16) a=(--mega --warps 16) ;;
          mega_bn64) a=(--mega) ;;
        esac
        bn=; [ "$v" = mega_bn64 ] && bn=64
        TILEDIST_DECODE_BN=$bn TILEDIST_GPU_HEAP_SIZE=24G run "megatune_$v" 110 tools/tiledist-run -n 1 --timeout 105 \
          tools/tiledist-model --config "$root/bench/qwen3-8b.json" --layers 36 --batch 1 --seqlen 128 --reps 1 \
          --decode 8 "${a[@]}"
        grep -E "a step|rror" "$logs/megatune_$v.log" | head -2
      done ;;
    split)
      export TILEDIST_WAIT_TIMEOUT=30
      issue33_tests split 115 55
      for v in mega_fetch graph mega graph_whole; do
        a=(); case $v in mega*) a=(--mega) ;; esac
        sp=; case $v in *_whole) sp=0 ;; esac
        pf=; [ "$v" = mega ] && pf=0
        TILEDIST_CACHE_DIR=/tmp/splitcache TILEDIST_DECODE_SPLIT=$sp TILEDIST_MEGA_PREFETCH=$pf \
          TILEDIST_GPU_HEAP_SIZE=24G run "split_$v" 105 \
          tools/tiledist-run -n 1 --timeout 100 tools/tiledist-model --config "$root/bench/qwen3-8b.json" --layers 36 \
          --batch 1 --seqlen 128 --reps 1 --decode 8 "${a[@]}"
        echo "$v: $(grep -E "a step|rror" "$logs/split_$v.log" | head -2)"
        [ "$v" = mega_fetch ] && ptxinfo /tmp/splitcache mega_
      done ;;
    quick)
      export TILEDIST_WAIT_TIMEOUT=30
      issue33_tests quick 95 40
      rm -rf /tmp/quickprof
      TILEDIST_CACHE_DIR=/tmp/quickcache TILEDIST_PROFILE=/tmp/quickprof TILEDIST_GPU_HEAP_SIZE=24G run quick_prof 120 \
        tools/tiledist-run -n 1 --timeout 115 tools/tiledist-model --config "$root/bench/qwen3-8b.json" --layers 36 \
        --batch 1 --seqlen 128 --reps 1 --decode 2 --mega
      echo "profiled: $(grep -E "a step|rror" "$logs/quick_prof.log" | head -2)"
      tools/tiledist-trace summary /tmp/quickprof/*.json > "$logs/quick_summary.txt" 2>&1
      head -30 "$logs/quick_summary.txt"
      ptxinfo /tmp/quickcache mega_
      TILEDIST_GPU_HEAP_SIZE=24G run quick_bench 300 stdbuf -oL tools/tiledist-run -n 1 --timeout 295 bench/model_bench 1 \
        --config "$root/bench/qwen3-8b.json" --layers 36 --seqlens "" --decode-batches 1 --steps 8
      grep -vE '^\s*$' "$logs/quick_bench.log" | tail -12 ;;
    megaprof)
      # (the profile of one persistent step at batch 1 and 8: what each SM spends on each task's
      # tiles and on waiting)
      for b in 1 8; do
        rm -rf "/tmp/megaprof$b"
        TILEDIST_PROFILE=/tmp/megaprof$b TILEDIST_GPU_HEAP_SIZE=24G run "megaprof_$b" 200 tools/tiledist-run -n 1 \
          --timeout 195 tools/tiledist-model --config "$root/bench/qwen3-8b.json" --layers 36 --batch "$b" --seqlen 128 \
          --reps 1 --decode 2 --mega
        echo "batch $b: $(grep -E "a step|rror" "$logs/megaprof_$b.log" | head -2)"
        tools/tiledist-trace summary /tmp/megaprof$b/*.json > "$logs/megaprof_summary_$b.txt" 2>&1
        head -40 "$logs/megaprof_summary_$b.txt"
      done ;;
    megabench|megabench32)
      # (batch 1 and 8 fill a call's 10 minutes: 32 is a call of its own)
      batches=1,8; [ "$stage" = megabench32 ] && batches=32
      TILEDIST_GPU_HEAP_SIZE=24G run "$stage" 560 stdbuf -oL tools/tiledist-run -n 1 --timeout 550 bench/model_bench 1 \
        --config "$root/bench/qwen3-8b.json" --layers 36 --seqlens "" --decode-batches "$batches" --steps 8
      grep -vE '^\s*$' "$logs/$stage.log" | tail -16 ;;
    worlds)
      export TILEDIST_WAIT_TIMEOUT=30 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
      run dist2 120 tools/tiledist-run -n 2 --timeout 115 tests/cuda_dist_test --gtest_filter=-GpuFaults.*
      grep -E "^\[0\] \[  (PASSED|FAILED)|Failure" "$logs/dist2.log" | head -6
      TILEDIST_WAIT_TIMEOUT=2 run fault2 60 tools/tiledist-run -n 2 --timeout 55 tests/cuda_dist_test --gtest_filter='GpuFaults.AWaitThatNever*'
      grep -E "^\[0\] \[  (PASSED|FAILED)" "$logs/fault2.log" | head -3
      TILEDIST_WORLD=nvshmem run nvshmem-dist2 120 tools/tiledist-run -n 2 --timeout 115 tests/cuda_dist_test --gtest_filter=-GpuFaults.*
      grep -E "^\[0\] \[  (PASSED|FAILED)|Failure" "$logs/nvshmem-dist2.log" | head -6
      ;;
    nvcoll)
      export TILEDIST_WAIT_TIMEOUT=30 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
      TILEDIST_WORLD=nvshmem run nvshmem-collectives2 560 tools/tiledist-run -n 2 --timeout 555 tests/cuda_collectives_test
      grep -E "^\[0\] \[  (PASSED|FAILED)|Failure" "$logs/nvshmem-collectives2.log" | head -10 ;;
    *) echo "unknown stage '$stage'" ;;
  esac
done
