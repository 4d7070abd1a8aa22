#!/usr/bin/env python3
"""PyTorch's side of bench/ep_bench (which runs this script as a child process beside each rank,
with the same shapes, and prints both side by side).

    ep_baseline.py a2a --tokens T --hidden H --experts E --topk K [--fp8] [--reps 20]
        one process of the job (torch.distributed's environment: RANK, WORLD_SIZE, MASTER_ADDR,
        MASTER_PORT; the GPU of $TILEDIST_DEVICE or $TILEDIST_LOCAL_RANK); prints "ms <dispatch>
        <combine>": NCCL's all-to-all (torch.distributed.all_to_all_single) moving the bytes our
        dispatch and combine move: each token's row to the rank of each of its top-k experts
        (uniform random picks, k distinct), as bf16 rows, or --fp8 as e4m3 rows with a f32 scale
        per 128 channels, and the bf16 rows back. The split sizes are known ahead (no count
        exchange timed) and the rows already in destination order (no permutation timed): the
        transfer alone, each call after a barrier.
"""
import argparse
import datetime
import os

import torch
import torch.distributed as dist

from baseline_io import median_ms


def a2a(args):
    n = int(os.environ["WORLD_SIZE"])
    me = int(os.environ["RANK"])
    dev = int(os.environ.get("TILEDIST_DEVICE", os.environ.get("TILEDIST_LOCAL_RANK", "0"))) % torch.cuda.device_count()
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120), device_id=torch.device("cuda", dev))
    t, h, e, k = args.tokens, args.hidden, args.experts, args.topk
    per_rank = e // n
    gen = torch.Generator(device="cuda")
    # Every rank's picks (the same draws everywhere), so that each knows what it receives.
    counts = torch.zeros(n, n, dtype=torch.int64)  # [from, to]: rows
    for r in range(n):
        gen.manual_seed(1234 + r)
        ids = torch.rand(t, e, device="cuda", generator=gen).topk(k, dim=-1).indices
        counts[r] = torch.bincount((ids // per_rank).flatten(), minlength=n).cpu()
    row_bytes = h + 4 * ((h + 127) // 128) if args.fp8 else 2 * h
    send = [int(c) * row_bytes for c in counts[me]]
    recv = [int(c) * row_bytes for c in counts[:, me]]
    out_rows = torch.empty(sum(send), dtype=torch.uint8, device="cuda")
    in_rows = torch.empty(sum(recv), dtype=torch.uint8, device="cuda")
    back_send = [int(c) * 2 * h for c in counts[:, me]]
    back_recv = [int(c) * 2 * h for c in counts[me]]
    back_out = torch.empty(sum(back_send), dtype=torch.uint8, device="cuda")
    back_in = torch.empty(sum(back_recv), dtype=torch.uint8, device="cuda")

    def dispatch():
        dist.all_to_all_single(in_rows, out_rows, recv, send)

    def combine():
        dist.all_to_all_single(back_in, back_out, back_recv, back_send)

    d = median_ms(dispatch, args.warmup, args.reps, before=dist.barrier)
    c = median_ms(combine, args.warmup, args.reps, before=dist.barrier)
    dist.destroy_process_group()
    return d, c


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["a2a"])
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--experts", type=int, required=True)
    p.add_argument("--topk", type=int, required=True)
    p.add_argument("--fp8", action="store_true")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()
    d, c = a2a(args)
    print(f"ms {d:.6f} {c:.6f}")


if __name__ == "__main__":
    main()
