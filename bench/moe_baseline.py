#!/usr/bin/env python3
"""PyTorch's side of bench/moe_bench (which runs this script as a child process with the same
shapes, and prints both side by side).

    moe_baseline.py mlp --tokens T --hidden H --inter I --experts E --topk K [--reps 20]
        prints "ms <median>": the MoE MLP as a PyTorch MoE layer runs it on one GPU: the token
        slots sorted by expert (argsort, bincount, cumsum), the tokens permuted, the gate/up
        projection by torch._grouped_mm, silu(gate) * up, the down projection by
        torch._grouped_mm, each row times its score, and index_add_ back to its token; bf16,
        random inputs, top-k of random logits. --fp8: PyTorch's own f8 path for the same layer:
        e4m3 weights with a scale per expert and output column, the permuted tokens and the
        SwiGLU output quantized per row, torch._scaled_grouped_mm for both projections.
    moe_baseline.py mlp-dist --tokens T --hidden H --inter I --experts E --topk K [--reps 20]
        one process of a tensor-parallel job (torch.distributed's environment: RANK, WORLD_SIZE,
        MASTER_ADDR, MASTER_PORT; the GPU of $TILEDIST_DEVICE or $TILEDIST_LOCAL_RANK), T tokens
        on each rank, the intermediate size split over the ranks; prints "ms <median>": the
        layer as a PyTorch tensor-parallel MoE runs it: NCCL's all-gather of the tokens, their
        top-k ids and scores, the MLP above over the gathered batch with this rank's slice of
        the experts, NCCL's reduce-scatter of the sums (bf16), each call after a barrier.
    moe_baseline.py gemm --tokens T --n N --k K --experts E --topk K [--reps 20]
        prints "ms <median>": the MoE up projection alone (Triton-distributed's ag_moe without the
        gather, one rank): the slots sorted by expert, the tokens permuted, torch._grouped_mm
        with W [E, N, K] given transposed; bf16, top-k of random logits.
    moe_baseline.py reduce --tokens T --n N --k K --experts E --topk K [--reps 20]
        prints "ms <median>": the MoE down projection and top-k combine alone (Triton-
        distributed's moe_reduce_rs without the reduce-scatter, one rank): the slots' rows
        already in expert order (as the up projection leaves them), torch._grouped_mm with W
        [E, N, K] given transposed, each row times its score, index_add_ to its token.
    moe_baseline.py route --tokens T --experts E --topk K --block-rows BM [--sigmoid] [--reps 50]
        prints "ms <median>": routing as a PyTorch MoE layer does it without a custom kernel:
        softmax (or sigmoid) of the logits, torch.topk, the k scores renormalized, then the
        slots sorted by expert and padded to BM rows per expert (vLLM's moe_align_block_size
        in torch ops: a stable argsort, bincount, cumsum, a scatter), on random f32 logits.
"""
import argparse
import sys

import torch

from baseline_io import median_ms


def route(logits, k, bm, sigmoid):
    scores = torch.sigmoid(logits) if sigmoid else torch.softmax(logits, -1)
    w, ids = torch.topk(scores, k, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    flat = ids.flatten()
    e = logits.shape[1]
    n = flat.numel()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=e)
    padded = (counts + bm - 1) // bm * bm
    starts = torch.cumsum(padded, 0) - padded
    firsts = torch.cumsum(counts, 0) - counts
    experts = flat[order]
    rows = starts[experts] + torch.arange(n, device=flat.device) - firsts[experts]
    sorted_ids = torch.full((n + e * (bm - 1),), n, dtype=torch.int32, device=flat.device)
    sorted_ids[rows] = order.to(torch.int32)
    return w, ids, sorted_ids


def mlp(x, w13, w2, ids, weights, scales=None):
    """The MoE MLP in torch ops; `scales` (s13, s2): w13 and w2 are e4m3 with a scale per expert
    and output column, the permuted tokens and SwiGLU's output quantized per row, the products
    by torch._scaled_grouped_mm."""
    t, h = x.shape
    e, i = w2.shape[0], w2.shape[2]
    k = ids.shape[1]
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    offs = torch.cumsum(torch.bincount(flat, minlength=e), 0).to(torch.int32)
    token = order // k

    def product(a, w, s):
        if scales is None:
            return torch._grouped_mm(a, w.transpose(-2, -1), offs=offs)
        aq, a_s = quantize_rows(a)
        return torch._scaled_grouped_mm(aq, w.transpose(-2, -1), a_s, s, offs=offs, out_dtype=torch.bfloat16)

    gu = product(x[token], w13, scales and scales[0])
    y = product(torch.nn.functional.silu(gu[:, :i]) * gu[:, i:], w2, scales and scales[1])
    y = y * weights.flatten()[order].unsqueeze(1).to(y.dtype)
    return torch.zeros(t, h, dtype=x.dtype, device=x.device).index_add_(0, token, y)


def quantize_rows(t):
    s = t.abs().amax(-1, keepdim=True).float().clamp(min=1e-10) / 448.0
    return (t.float() / s).to(torch.float8_e4m3fn), s.squeeze(-1)


def up_projection(x, w, ids):
    e, k = w.shape[0], ids.shape[1]
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    offs = torch.cumsum(torch.bincount(flat, minlength=e), 0).to(torch.int32)
    return torch._grouped_mm(x[order // k], w.transpose(-2, -1), offs=offs)


def mlp_dist(args):
    import datetime
    import os

    import torch.distributed as dist

    n = int(os.environ["WORLD_SIZE"])
    dev = int(os.environ.get("TILEDIST_DEVICE", os.environ.get("TILEDIST_LOCAL_RANK", "0"))) % torch.cuda.device_count()
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120), device_id=torch.device("cuda", dev))
    t, h, e, k = args.tokens, args.hidden, args.experts, args.topk
    i = args.inter // n
    logits = torch.randn(t, e, dtype=torch.float32, device="cuda")
    weights, ids = torch.topk(torch.softmax(logits, -1), k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    x = torch.randn(t, h, dtype=torch.bfloat16, device="cuda")
    w13 = torch.randn(e, 2 * i, h, dtype=torch.bfloat16, device="cuda") * 0.05
    w2 = torch.randn(e, h, i, dtype=torch.bfloat16, device="cuda") * 0.05
    xs = torch.empty(n * t, h, dtype=x.dtype, device="cuda")
    idss = torch.empty(n * t, k, dtype=ids.dtype, device="cuda")
    ws = torch.empty(n * t, k, dtype=weights.dtype, device="cuda")
    out = torch.empty(t, h, dtype=x.dtype, device="cuda")

    def layer():
        dist.all_gather_into_tensor(xs, x)
        dist.all_gather_into_tensor(idss, ids)
        dist.all_gather_into_tensor(ws, weights)
        dist.reduce_scatter_tensor(out, mlp(xs, w13, w2, idss, ws))

    ms = median_ms(layer, args.warmup, args.reps, before=dist.barrier)
    dist.destroy_process_group()
    return ms


def down_projection(act, w, ids, weights):
    e, k = w.shape[0], ids.shape[1]
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    offs = torch.cumsum(torch.bincount(flat, minlength=e), 0).to(torch.int32)
    y = torch._grouped_mm(act, w.transpose(-2, -1), offs=offs)
    y = y * weights.flatten()[order].unsqueeze(1).to(y.dtype)
    return torch.zeros(ids.shape[0], w.shape[1], dtype=act.dtype, device=act.device).index_add_(0, order // k, y)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["route", "mlp", "mlp-dist", "gemm", "reduce"])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--inter", type=int, default=768)
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--experts", type=int, required=True)
    p.add_argument("--topk", type=int, required=True)
    p.add_argument("--block-rows", type=int, default=64)
    p.add_argument("--sigmoid", action="store_true")
    p.add_argument("--fp8", action="store_true")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=50)
    args = p.parse_args()
    if args.mode == "mlp-dist":
        print(f"ms {mlp_dist(args):.6f}")
        return 0
    logits = torch.randn(args.tokens, args.experts, dtype=torch.float32, device="cuda")
    fn = lambda: route(logits, args.topk, args.block_rows, args.sigmoid)
    if args.mode == "mlp":
        weights, ids = torch.topk(torch.softmax(logits, -1), args.topk, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        x = torch.randn(args.tokens, args.hidden, dtype=torch.bfloat16, device="cuda")
        w13 = torch.randn(args.experts, 2 * args.inter, args.hidden, dtype=torch.bfloat16, device="cuda") * 0.05
        w2 = torch.randn(args.experts, args.hidden, args.inter, dtype=torch.bfloat16, device="cuda") * 0.05
        fn = lambda: mlp(x, w13, w2, ids, weights)
        if args.fp8:
            w13, w2 = w13.to(torch.float8_e4m3fn), w2.to(torch.float8_e4m3fn)
            s13 = torch.full((args.experts, 2 * args.inter), 0.01, dtype=torch.float32, device="cuda")
            s2 = torch.full((args.experts, args.hidden), 0.01, dtype=torch.float32, device="cuda")
            fn = lambda: mlp(x, w13, w2, ids, weights, (s13, s2))
    if args.mode == "gemm":
        _, ids = torch.topk(torch.softmax(logits, -1), args.topk, dim=-1)
        x = torch.randn(args.tokens, args.k, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(args.experts, args.n, args.k, dtype=torch.bfloat16, device="cuda")
        fn = lambda: up_projection(x, w, ids)
    if args.mode == "reduce":
        weights, ids = torch.topk(torch.softmax(logits, -1), args.topk, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        act = torch.randn(args.tokens * args.topk, args.k, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(args.experts, args.n, args.k, dtype=torch.bfloat16, device="cuda")
        fn = lambda: down_projection(act, w, ids, weights)
    print(f"ms {median_ms(fn, args.warmup, args.reps):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
