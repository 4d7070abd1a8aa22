#!/usr/bin/env python3
"""PyTorch's side of bench/attention_bench (which runs this script as a child process, passing
the same shapes, and prints both side by side): torch.nn.functional.scaled_dot_product_attention.

    attention_baseline.py time  --b B --h H --s S --d D [--causal] [--warmup 3] [--reps 20]
        prints "ms <median>" and "kernel <name>" (of SDPA's backend): the median of --reps single calls, each timed
        with CUDA events, after --warmup untimed ones, on random bf16 inputs (as attention_bench
        times ours).
    attention_baseline.py check --b B --h H --s S --d D [--causal] --q Q --k K --v V --out O
        reads q, k and v as raw bf16 files, writes SDPA's output (bf16) to O.
    attention_baseline.py decode --b B --h H --hkv HKV --s L --d D [--warmup 3] [--reps 20]
        a decode step (bench/decode_bench): one query token a sequence, q [B, H, 1, D] against a
        cache [B, HKV, L, D] (SDPA's enable_gqa); prints "ms" and "kernel" as `time`.

Tensors are laid out as attention_bench's: rows of tokens, [B * S, H, D] (as FlashAttention's
varlen API); SDPA gets them as [B, H, S, D] views of that memory (transposed, not copied), as a
model calls it after its projections.
"""
import argparse
import sys

import torch
import torch.nn.functional as F

from baseline_io import median_ms, read_bf16, write_bf16


def as_bhsd(x, b, s, h, d):
    return x.view(b, s, h, d).transpose(1, 2)


def sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main_kernel(fn):
    """The name of the GPU kernel that takes most of `fn`'s time (which SDPA backend ran), or
    "unknown" where the profiler cannot say."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        events = [e for e in prof.key_averages() if getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)) > 0]
        top = max(events, key=lambda e: getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)))
        name = top.key[5:] if top.key.startswith("void ") else top.key
        return name.split("<")[0].split("(")[0].strip().replace(" ", "_")[:100]
    except Exception:  # (a diagnostic only)
        return "unknown"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["time", "check", "decode"])
    p.add_argument("--b", type=int, required=True)
    p.add_argument("--h", type=int, required=True)
    p.add_argument("--s", type=int, required=True)
    p.add_argument("--d", type=int, required=True)
    p.add_argument("--hkv", type=int, default=0)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--q")
    p.add_argument("--k")
    p.add_argument("--v")
    p.add_argument("--out")
    args = p.parse_args()
    b, h, s, d = args.b, args.h, args.s, args.d
    if args.mode == "decode":
        hkv = args.hkv or h
        q = torch.empty(b, h, 1, d, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
        k, v = (torch.empty(b, hkv, s, d, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1) for _ in range(2))
        step = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=hkv != h)
        print(f"ms {median_ms(step, args.warmup, args.reps):.6f}")
        print(f"kernel {main_kernel(step)}")
        return 0
    n = b * s * h * d
    if args.mode == "check":
        q, k, v = (as_bhsd(read_bf16(path, n).cuda(), b, s, h, d) for path in (args.q, args.k, args.v))
        write_bf16(args.out, sdpa(q, k, v, args.causal).transpose(1, 2))  # back to [B, S, H, D]
        return 0
    q, k, v = (as_bhsd(torch.empty(n, dtype=torch.bfloat16, device="cuda").uniform_(-1, 1), b, s, h, d) for _ in range(3))
    print(f"ms {median_ms(lambda: sdpa(q, k, v, args.causal), args.warmup, args.reps):.6f}")
    print(f"kernel {main_kernel(lambda: sdpa(q, k, v, args.causal))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
