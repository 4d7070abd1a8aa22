#!/usr/bin/env python3
"""torch._grouped_mm's side of bench/grouped_gemm_bench (which runs this script as a child
process, passing the same shapes and offsets, and prints both side by side).

    grouped_gemm_baseline.py time  --rows R --n N --k K --offs o1,o2,... [--layout nk|kn] [--warmup 3] [--reps 20]
        prints "ms <median>": the median of --reps single calls, each timed with CUDA events,
        after --warmup untimed ones, on random bf16 inputs (as gemm_bench times ours).
    grouped_gemm_baseline.py check --rows R --n N --k K --offs ... [--layout nk|kn] --a A --w W --out C
        reads A [R, K] and W ([E, N, K] for nk, [E, K, N] for kn) as raw bf16 files, writes
        torch._grouped_mm's C [R, N] (bf16) to C (rows past the last offset: zeros).

W [E, N, K] (nk, nn.Linear's weight per expert) is given to torch as w.transpose(-2, -1), as
MoE layers call it; kn passes W [E, K, N] as it is.
"""
import argparse
import sys

import torch

from baseline_io import median_ms, read_bf16, write_bf16


def grouped(a, w, offs, layout):
    return torch._grouped_mm(a, w.transpose(-2, -1) if layout == "nk" else w, offs=offs)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["time", "check"])
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--offs", required=True)
    p.add_argument("--layout", choices=["nk", "kn"], default="nk")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--a")
    p.add_argument("--w")
    p.add_argument("--out")
    args = p.parse_args()
    offs = torch.tensor([int(x) for x in args.offs.split(",")], dtype=torch.int32, device="cuda")
    e, r, n, k = offs.numel(), args.rows, args.n, args.k
    w_shape = (e, n, k) if args.layout == "nk" else (e, k, n)
    if args.mode == "check":
        a = read_bf16(args.a, r * k).view(r, k).cuda()
        w = read_bf16(args.w, e * n * k).view(*w_shape).cuda()
        c = grouped(a, w, offs, args.layout)
        c[int(offs[-1]):] = 0
        write_bf16(args.out, c)
        return 0
    a = torch.randn(r, k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(*w_shape, dtype=torch.bfloat16, device="cuda")
    print(f"ms {median_ms(lambda: grouped(a, w, offs, args.layout), args.warmup, args.reps):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
