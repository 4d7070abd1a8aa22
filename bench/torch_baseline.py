#!/usr/bin/env python3
"""The PyTorch baselines of the multi-GPU benchmarks, timed on the GPUs our own benchmarks use.

    torchrun --nproc-per-node N bench/torch_baseline.py [--size 8192] [--iters 20]

(or under `tiledist-run -n N` / `mpirun -n N`: the rank and world come from the environment of
either). Prints, on rank 0, a table of microseconds per call: the median of five turns of --iters calls
queued back to back, the functions timed in turns (`timed` says how):

  - NCCL all-reduce, bf16, 8 KB to 512 MB, with its bus bandwidth;
  - AllGather+GEMM at M (gathered) = N = K = --size, bf16: NCCL's all-gather then cuBLAS,
    PyTorch's fused symmetric-memory op (torch.ops.symm_mem.fused_all_gather_matmul), and the
    GEMM and the all-gather alone;
  - GEMM+ReduceScatter, same shape: cuBLAS then NCCL's reduce-scatter, the fused op
    (fused_matmul_reduce_scatter), and the reduce-scatter alone.

The fused ops' results are checked against the unfused ones (relative error in norm under 1e-2:
both are bf16 GEMMs, summed in another order). Keep NCCL_NVLS_ENABLE=0 and
NVSHMEM_DISABLE_NVLS=1 in the environment, as for our benchmarks.
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory  # noqa: F401 (registers torch.ops.symm_mem's fused ops)


def env_int(*names, default=None):
    for n in names:
        if n in os.environ:
            return int(os.environ[n])
    return default


def timed(fns, iters, turns=5):
    """Microseconds per call of each of `fns`, timed in turns (so that the GPU's clock, which
    falls as it heats, weighs on each alike): every turn times `iters` calls of each, queued
    back to back after a barrier; the median turn of each, the slowest rank's."""
    for fn in fns:
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    times = [[] for _ in fns]
    for _ in range(turns):
        for i, fn in enumerate(fns):
            dist.barrier()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            times[i].append(start.elapsed_time(end) * 1000.0 / iters)
    t = torch.tensor([sorted(ts)[len(ts) // 2] for ts in times], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def rel_error(x, want):
    return ((x.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=8192, help="M (gathered) = N = K of the overlapped GEMMs")
    parser.add_argument("--iters", type=int, default=20, help="calls per timed round")
    args = parser.parse_args()

    rank = env_int("RANK", "OMPI_COMM_WORLD_RANK", "TILEDIST_RANK", default=0)
    world = env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "TILEDIST_WORLD_SIZE", default=1)
    local = env_int("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "TILEDIST_LOCAL_RANK", default=rank)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", torch.cuda.current_device()))
    group = dist.group.WORLD
    out = sys.stdout if rank == 0 else open(os.devnull, "w")
    print(f"PyTorch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
          f"{world} x {torch.cuda.get_device_name()}", file=out)

    # ---- NCCL all-reduce, bf16
    print(f"\n{'NCCL all-reduce bf16':<24} {'us':>10} {'busbw GB/s':>11}", file=out)
    for nbytes in (8 << 10, 256 << 10, 4 << 20, 64 << 20, 512 << 20):
        x = torch.randn(nbytes // 2, dtype=torch.bfloat16, device="cuda")
        us, = timed([lambda: dist.all_reduce(x)], args.iters)
        busbw = nbytes * 2 * (world - 1) / world / (us * 1e-6) / 1e9
        print(f"{nbytes:>22} B {us:>10.1f} {busbw:>11.1f}", file=out)
        del x

    # ---- AllGather+GEMM and GEMM+ReduceScatter
    S = args.size
    if S % world:
        raise SystemExit(f"torch_baseline: --size {S} is not a multiple of the world size {world}")
    torch.manual_seed(1234 + rank)
    a_shard = torch.randn(S // world, S, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(S, S, dtype=torch.bfloat16, device="cuda") / S**0.5
    gathered = torch.empty(S, S, dtype=torch.bfloat16, device="cuda")

    def ag_then_mm():
        dist.all_gather_into_tensor(gathered, a_shard)
        return gathered @ b

    def ag_fused():
        return torch.ops.symm_mem.fused_all_gather_matmul(a_shard, [b], gather_dim=0, group_name=group.group_name)

    want = ag_then_mm()
    got = ag_fused()[1][0]
    err_ag = rel_error(got, want)
    a_full = torch.randn(S, S, dtype=torch.bfloat16, device="cuda")
    scattered = torch.empty(S // world, S, dtype=torch.bfloat16, device="cuda")

    def mm_then_rs():
        dist.reduce_scatter_tensor(scattered, a_full @ b)
        return scattered

    def rs_fused():
        return torch.ops.symm_mem.fused_matmul_reduce_scatter(a_full, b, "sum", scatter_dim=0, group_name=group.group_name)

    want_rs = mm_then_rs().clone()
    err_rs = rel_error(rs_fused(), want_rs)
    if err_ag > 1e-2 or err_rs > 1e-2:
        raise SystemExit(f"torch_baseline: the fused ops disagree with the unfused ones "
                         f"(AllGather+GEMM {err_ag:.2e}, GEMM+ReduceScatter {err_rs:.2e})")
    partial = a_full @ b
    rows = [
        ("AllGather+GEMM: NCCL all-gather, then cuBLAS", ag_then_mm),
        ("  PyTorch fused (symm_mem)", ag_fused),
        ("  the GEMM alone (cuBLAS)", lambda: gathered @ b),
        ("  the all-gather alone (NCCL)", lambda: dist.all_gather_into_tensor(gathered, a_shard)),
        ("GEMM+ReduceScatter: cuBLAS, then NCCL", mm_then_rs),
        ("  PyTorch fused (symm_mem)", rs_fused),
        ("  the reduce-scatter alone (NCCL)", lambda: dist.reduce_scatter_tensor(scattered, partial)),
    ]
    rows = list(zip([label for label, _ in rows], timed([fn for _, fn in rows], args.iters)))
    print(f"\nM=N=K={S}, bf16, {world} ranks {'':<8} {'us':>10}", file=out)
    for label, us in rows:
        print(f"{label:<46} {us:>10.1f}", file=out)
    print(f"(fused against unfused, relative error: AllGather+GEMM {err_ag:.1e}, GEMM+ReduceScatter {err_rs:.1e})",
          file=out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
