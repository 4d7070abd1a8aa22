#!/usr/bin/env python3
"""PyTorch's side of bench/sp_attention_bench (run as a child process beside each rank, with the
same shapes): the work of sequence-parallel attention done as a PyTorch user does it, two ways.
AllGather: NCCL's all-gather of every rank's keys and values (torch.distributed.
all_gather_into_tensor), then scaled_dot_product_attention for this rank's queries over the
gathered sequence (causal: the keys up to each query's position, SDPA's lower-right causal mask
over the ranks' slices up to ours; grouped-query heads by enable_gqa). Ulysses (DeepSpeed's,
where the heads split over the ranks): each head group's share of q, k and v made contiguous and
sent to its rank by NCCL's all-to-all (all_to_all_single), SDPA over the whole sequences for
this rank's heads, and the outputs back the same way into [B, S, heads, D].

    sp_attention_baseline.py --b B --s S --h H --kv KV --d D [--causal] [--reps 10]
        one process of the job (torch.distributed's environment: RANK, WORLD_SIZE, MASTER_ADDR,
        MASTER_PORT; the GPU of $TILEDIST_DEVICE or $TILEDIST_LOCAL_RANK); S a rank's tokens;
        prints "ms <all-gather + SDPA> <SDPA alone> <Ulysses>" (the last -1 where the heads do not
        split over the ranks), each call after a barrier.
"""
import argparse
import datetime
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from baseline_io import median_ms


def main():
    p = argparse.ArgumentParser()
    for a in ("--b", "--s", "--h", "--kv", "--d"):
        p.add_argument(a, type=int, required=True)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    n, me = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    dev = int(os.environ.get("TILEDIST_DEVICE", os.environ.get("TILEDIST_LOCAL_RANK", "0"))) % torch.cuda.device_count()
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120), device_id=torch.device("cuda", dev))
    b, s, h, kv, d = args.b, args.s, args.h, args.kv, args.d
    # [B, S, heads, D] rows of tokens, as ours; gathered along the ranks: [ranks, B, S, kv, D]
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s, kv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, s, kv, d, device="cuda", dtype=torch.bfloat16)
    k_all = torch.empty(n, b, s, kv, d, device="cuda", dtype=torch.bfloat16)
    v_all = torch.empty_like(k_all)
    keys = (me + 1) * s if args.causal else n * s  # (causal: the slices of the ranks up to ours)
    mask = causal_lower_right(s, keys) if args.causal else None

    def sdpa():
        # [ranks, B, S, kv, D] -> [B, kv, ranks * S, D] (a view where B is 1; a copy else, as a user's)
        kk = k_all[: keys // s].permute(1, 3, 0, 2, 4).reshape(b, kv, keys, d)
        vv = v_all[: keys // s].permute(1, 3, 0, 2, 4).reshape(b, kv, keys, d)
        return F.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, attn_mask=mask, enable_gqa=True)

    def step():
        dist.all_gather_into_tensor(k_all, k)
        dist.all_gather_into_tensor(v_all, v)
        return sdpa()

    def a2a(x):
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x)
        return out

    def ulysses():
        # [B, S, heads, D] -> [ranks, B, S, heads / ranks, D] (head group j's share at j), to the
        # groups' ranks: [ranks (the tokens' rank), B, S, heads / ranks, D] -> [B, heads / ranks,
        # ranks * S, D] (a view where B is 1)
        def gather(x, heads):
            got = a2a(x.reshape(b, s, n, heads // n, d).permute(2, 0, 1, 3, 4).contiguous())
            return got.permute(1, 3, 0, 2, 4).reshape(b, heads // n, n * s, d)

        o = F.scaled_dot_product_attention(gather(q, h), gather(k, kv), gather(v, kv), is_causal=args.causal,
                                           enable_gqa=True)
        # [B, heads / ranks, ranks * S, D] -> [ranks (the tokens' rank), B, S, heads / ranks, D],
        # back: [ranks (the head group), B, S, heads / ranks, D] -> [B, S, heads, D]
        back = a2a(o.reshape(b, h // n, n, s, d).permute(2, 0, 3, 1, 4).contiguous())
        return back.permute(1, 2, 0, 3, 4).reshape(b, s, h, d)

    both = median_ms(step, args.warmup, args.reps, before=dist.barrier)
    alone = median_ms(sdpa, args.warmup, args.reps, before=dist.barrier)
    uly = median_ms(ulysses, args.warmup, args.reps, before=dist.barrier) if h % n == 0 and kv % n == 0 else -1
    dist.destroy_process_group()
    print(f"ms {both:.6f} {alone:.6f} {uly:.6f}")


if __name__ == "__main__":
    main()
