#!/usr/bin/env python3
"""PyTorch's side of bench/model_bench (which runs this script as a child process of every rank,
with the same config and seed, and prints both side by side).

    model_baseline.py prefill --hidden H --heads HQ --kv-heads HK --head-dim D --inter I
                              [--eps E] [--theta T] --layers L --batch B --seqlen S --seed X
                              [--reps R] [--out FILE] [--check]
        one process of a tensor-parallel job (torch.distributed's environment where WORLD_SIZE
        > 1: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; the GPU of $TILEDIST_DEVICE or
        $TILEDIST_LOCAL_RANK); prints "ms <median>": the prefill of L dense decoder layers
        (Qwen3's: RMSNorm, QKV, per-head q/k RMSNorm, rotary embeddings, causal GQA attention
        by SDPA, O projection, RMSNorm, SwiGLU MLP; with --experts E --topk K --expert-inter Ie,
        Qwen3-MoE's MLP: moe() below) over B sequences of S tokens as a PyTorch
        tensor-parallel model runs it in bf16: each rank holds T / ranks tokens of the residual
        stream, NCCL's all-gather before QKV and before gate/up, NCCL's reduce-scatter after O
        and after down (sequence parallel, as tiledist's PrefillLayer splits the work). The
        weights and embeddings are tiledist's (model/prefill_layer.h's random_value: a
        splitmix64 hash of the seed, the Hugging Face name and the index, computed here again
        in int64 tensor ops), so both sides compute the same model. --out FILE: the rank's
        tokens' hidden states after the L layers, raw f32 [T / ranks, H]. --check: the hash
        checked against Python's integers first.
    model_baseline.py decode ... --steps K (the prefill's arguments, S the prompt's tokens)
        prints "ms <median>": a decode step of the same layers (one token a sequence, the same
        on every rank: tiledist's "model.embed_tokens.decode" rows) after the prompt's prefill
        filled a static KV cache (B x (S + K) rows a layer, the rank's KV heads), the median
        over the K steps: QKV of the rank's heads, q/k norm and rotary at the step's position,
        the key and value stored into the cache, SDPA over the cache's rows so far, O, NCCL's
        all-reduce, the MLP, NCCL's all-reduce. --out FILE: the last step's hidden states, raw
        f32 [B, H]. With --graph, the same K steps again as one CUDA graph a step (static
        shapes: the step's position a tensor, the key and value stored by index_copy_, SDPA over
        the whole cache with a mask of the rows so far, captured once, replayed each step), then
        "graph_ms <median>" and "graph_error <e>": the last step's hidden states against the
        eager steps', relative, in norm.
"""
import argparse
import ctypes
import datetime
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from baseline_io import median_ms
from moe_baseline import mlp as moe_mlp

MASK64 = (1 << 64) - 1
# The decode step's attention: FlashAttention's kernel (or the others PyTorch has but cuDNN's,
# whose graphs are built for each new key length, ~20 ms a step)
DECODE_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
# In a CUDA graph the attention reads the whole static cache under a mask (FlashAttention's
# kernel takes none)
GRAPH_BACKENDS = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def signed(v):
    v &= MASK64
    return v - (1 << 64) if v >= 1 << 63 else v


def splitmix64_int(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def tensor_key(seed, name):
    h = 0xCBF29CE484222325  # FNV-1a of the name's bytes
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & MASK64
    return splitmix64_int(seed ^ h)


def lsr(x, s):  # a logical right shift of int64 tensors (>> is arithmetic)
    return (x >> s) & ((1 << (64 - s)) - 1)


def random_values(key, index):
    """model::random_value(key, index) for an int64 tensor of indices (products wrap in int64 as
    in uint64)."""
    x = index + signed(key + 0x9E3779B97F4A7C15)
    x = (x ^ lsr(x, 30)) * signed(0xBF58476D1CE4E5B9)
    x = (x ^ lsr(x, 27)) * signed(0x94D049BB133111EB)
    x = x ^ lsr(x, 31)
    return (lsr(x, 40).to(torch.float64) * 2.0**-23 - 1.0).to(torch.float32)


def random_value_int(key, index):
    return float((splitmix64_int((key + index) & MASK64) >> 40) * 2.0**-23 - 1.0)


def check_hash():
    key = tensor_key(12345, "model.layers.0.mlp.up_proj.weight")
    idx = torch.tensor([0, 1, 7, 1 << 20, (1 << 40) + 3, 123456789], dtype=torch.int64, device="cuda")
    got = random_values(key, idx).tolist()
    want = [random_value_int(key, i) for i in idx.tolist()]
    if got != want:
        raise SystemExit(f"model_baseline.py: the tensor hash disagrees with Python's integers: {got} != {want}")


def linear_weight(seed, name, rows, cols, fan_in):
    """Rows `rows` x columns `cols` (int64 index tensors) of Hugging Face's weight `name` [out,
    fan_in], bf16, as tiledist's LayerWeights::random makes them: random_value / sqrt(fan_in)."""
    key = tensor_key(seed, name)
    scale = torch.tensor(1.0, dtype=torch.float32) / torch.sqrt(torch.tensor(float(fan_in), dtype=torch.float32))
    out = torch.empty(rows.numel(), cols.numel(), dtype=torch.bfloat16, device="cuda")
    step = max(1, (16 << 20) // max(1, cols.numel()))
    for r0 in range(0, rows.numel(), step):
        r = rows[r0:r0 + step]
        idx = r[:, None] * fan_in + cols[None, :]
        out[r0:r0 + step] = (random_values(key, idx) * scale.item()).to(torch.bfloat16)
    return out


def norm_weight(seed, name, n):
    v = random_values(tensor_key(seed, name), torch.arange(n, dtype=torch.int64, device="cuda"))
    return (1.0 + v / 8).to(torch.bfloat16)


def rng(a, n):
    return torch.arange(a, a + n, dtype=torch.int64, device="cuda")


class Layer:
    """Layer `l`'s weights as rank `me` of `n` holds them (tiledist's split: the rank's query
    heads, their KV heads, its intermediate columns)."""

    def __init__(self, a, l, me, n):
        p = f"model.layers.{l}."
        H, D, s = a.hidden, a.head_dim, a.seed
        hq, I = a.heads // n, a.inter // n
        if a.kv_heads >= n:
            kv0, hk = me * (a.kv_heads // n), a.kv_heads // n
        else:
            kv0, hk = me // (n // a.kv_heads), 1
        self.hq, self.hk = hq, hk
        cols = rng(0, H)
        self.in_norm = norm_weight(s, p + "input_layernorm.weight", H)
        self.post_norm = norm_weight(s, p + "post_attention_layernorm.weight", H)
        self.q_norm = norm_weight(s, p + "self_attn.q_norm.weight", D)
        self.k_norm = norm_weight(s, p + "self_attn.k_norm.weight", D)
        self.wqkv = torch.cat([
            linear_weight(s, p + "self_attn.q_proj.weight", rng(me * hq * D, hq * D), cols, H),
            linear_weight(s, p + "self_attn.k_proj.weight", rng(kv0 * D, hk * D), cols, H),
            linear_weight(s, p + "self_attn.v_proj.weight", rng(kv0 * D, hk * D), cols, H)])
        self.wo = linear_weight(s, p + "self_attn.o_proj.weight", rng(0, H), rng(me * hq * D, hq * D), a.heads * D)
        if a.experts:  # the router (whole), every expert's slice: w13 [E, 2 Ie, H], w2 [E, H, Ie]
            E, Ie = a.experts, a.expert_inter // n
            self.router = linear_weight(s, p + "mlp.gate.weight", rng(0, E), cols, H)
            x = [f"{p}mlp.experts.{e}." for e in range(E)]
            self.w13 = torch.stack([torch.cat([
                linear_weight(s, q + "gate_proj.weight", rng(me * Ie, Ie), cols, H),
                linear_weight(s, q + "up_proj.weight", rng(me * Ie, Ie), cols, H)]) for q in x])
            self.w2 = torch.stack([linear_weight(s, q + "down_proj.weight", rng(0, H), rng(me * Ie, Ie), a.expert_inter)
                                   for q in x])
            return
        self.w13 = torch.cat([
            linear_weight(s, p + "mlp.gate_proj.weight", rng(me * I, I), cols, H),
            linear_weight(s, p + "mlp.up_proj.weight", rng(me * I, I), cols, H)])
        self.w2 = linear_weight(s, p + "mlp.down_proj.weight", rng(0, H), rng(me * I, I), a.inter)


def moe(x, w, k):
    """Qwen3-MoE's MLP over the rows of x with this rank's slices of the experts (the sum over
    the ranks is the caller's): f32 router logits (tiledist's router GEMM keeps them f32), the
    softmax's top k renormalized, bf16 products by torch._grouped_mm (moe_baseline.py's mlp)."""
    logits = F.linear(x.float(), w.router.float())
    weights, ids = torch.topk(torch.softmax(logits, -1), k, dim=-1)
    weights = weights / weights.sum(-1, keepdim=True)
    return moe_mlp(x, w.w13, w.w2, ids, weights)


def rmsnorm(x, w, eps):  # Hugging Face's Qwen3RMSNorm
    y = x.float()
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)
    return w * y.to(x.dtype)


def rotate(x, cos, sin):  # [B, S, heads, D], cos/sin [S, D]
    half = x.shape[-1] // 2
    turned = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[None, :, None, :] + turned * sin[None, :, None, :]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["prefill", "decode"])
    ap.add_argument("--steps", type=int, default=0)
    for name in ("hidden", "heads", "kv-heads", "head-dim", "inter", "layers", "batch", "seqlen"):
        ap.add_argument("--" + name, type=int, required=True)
    ap.add_argument("--experts", type=int, default=0)
    ap.add_argument("--topk", type=int, default=0)
    ap.add_argument("--expert-inter", type=int, default=0)
    ap.add_argument("--eps", type=float, default=1e-6)
    ap.add_argument("--theta", type=float, default=1e6)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default="")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--graph", action="store_true")
    a = ap.parse_args()
    n = int(os.environ.get("WORLD_SIZE", "1"))
    me = int(os.environ.get("RANK", "0"))
    dev = int(os.environ.get("TILEDIST_DEVICE", os.environ.get("TILEDIST_LOCAL_RANK", "0"))) % torch.cuda.device_count()
    torch.cuda.set_device(dev)
    if n > 1:
        import torch.distributed as dist
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=300), device_id=torch.device("cuda", dev))
    if a.check:
        check_hash()
    B, S, H, D = a.batch, a.seqlen, a.hidden, a.head_dim
    T = B * S
    if T % n:
        raise SystemExit(f"model_baseline.py: {T} tokens over {n} ranks")
    Ts = T // n
    layers = [Layer(a, l, me, n) for l in range(a.layers)]
    hq, hk = layers[0].hq, layers[0].hk
    x0 = random_values(tensor_key(a.seed, "model.embed_tokens"), rng(me * Ts * H, Ts * H)).to(torch.bfloat16)
    x0 = x0.view(Ts, H)
    inv_freq = 1.0 / (a.theta ** (torch.arange(0, D, 2, dtype=torch.int64, device="cuda").float() / D))
    freqs = torch.arange(S, device="cuda").float()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)
    gathered = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
    scattered = torch.empty(Ts, H, dtype=torch.bfloat16, device="cuda")
    decoding = a.mode == "decode"
    if decoding and a.steps < 1:
        raise SystemExit("model_baseline.py: decode needs --steps >= 1")
    max_len = S + a.steps
    if decoding:
        kcache = [torch.zeros(B, max_len, hk, D, dtype=torch.bfloat16, device="cuda") for _ in layers]
        vcache = [torch.zeros(B, max_len, hk, D, dtype=torch.bfloat16, device="cuda") for _ in layers]
        steps_in = random_values(tensor_key(a.seed, "model.embed_tokens.decode"),
                                 rng(0, a.steps * B * H)).to(torch.bfloat16).view(a.steps, B, H)

    def all_gather(x):
        if n == 1:
            return x
        dist.all_gather_into_tensor(gathered, x)
        return gathered

    def reduce_scatter(x):
        if n == 1:
            return x
        dist.reduce_scatter_tensor(scattered, x)
        return scattered

    def layer(h, w, l):
        a1 = all_gather(rmsnorm(h, w.in_norm, a.eps))
        qkv = F.linear(a1, w.wqkv)
        q, k, v = qkv.split([hq * D, hk * D, hk * D], dim=-1)
        q = rotate(rmsnorm(q.reshape(B, S, hq, D), w.q_norm, a.eps), cos, sin)
        k = rotate(rmsnorm(k.reshape(B, S, hk, D), w.k_norm, a.eps), cos, sin)
        v = v.reshape(B, S, hk, D)
        if decoding:
            kcache[l][:, :S] = k
            vcache[l][:, :S] = v
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=hq != hk)
        o = o.transpose(1, 2).reshape(T, hq * D)
        h = h + reduce_scatter(F.linear(o, w.wo))
        a2 = all_gather(rmsnorm(h, w.post_norm, a.eps))
        if a.experts:
            return h + reduce_scatter(moe(a2, w, a.topk))
        g, u = F.linear(a2, w.w13).chunk(2, dim=-1)
        return h + reduce_scatter(F.linear(F.silu(g) * u, w.w2))

    def step():
        h = x0
        for l, w in enumerate(layers):
            h = layer(h, w, l)
        return h

    def all_reduce(x):
        if n > 1:
            dist.all_reduce(x)
        return x

    def decode_layer(h, w, l, p):
        qkv = F.linear(rmsnorm(h, w.in_norm, a.eps), w.wqkv)
        q, k, v = qkv.split([hq * D, hk * D, hk * D], dim=-1)
        c, s_ = dcos[p - S:p - S + 1], dsin[p - S:p - S + 1]  # (p: a step's position, past the prompt)
        q = rotate(rmsnorm(q.reshape(B, 1, hq, D), w.q_norm, a.eps), c, s_)
        k = rotate(rmsnorm(k.reshape(B, 1, hk, D), w.k_norm, a.eps), c, s_)
        kcache[l][:, p] = k[:, 0]
        vcache[l][:, p] = v.reshape(B, hk, D)
        with sdpa_kernel(DECODE_BACKENDS):  # (not cuDNN's, which builds a graph for each new length)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), kcache[l][:, :p + 1].transpose(1, 2),
                                               vcache[l][:, :p + 1].transpose(1, 2), enable_gqa=hq != hk)
        h = h + all_reduce(F.linear(o.transpose(1, 2).reshape(B, hq * D), w.wo))
        if a.experts:
            return h + all_reduce(moe(rmsnorm(h, w.post_norm, a.eps), w, a.topk))
        g, u = F.linear(rmsnorm(h, w.post_norm, a.eps), w.w13).chunk(2, dim=-1)
        return h + all_reduce(F.linear(F.silu(g) * u, w.w2))

    def graph_layer(h, w, l, pos, c, s_, mask):  # (decode_layer with static shapes, for a CUDA graph)
        qkv = F.linear(rmsnorm(h, w.in_norm, a.eps), w.wqkv)
        q, k, v = qkv.split([hq * D, hk * D, hk * D], dim=-1)
        q = rotate(rmsnorm(q.reshape(B, 1, hq, D), w.q_norm, a.eps), c, s_)
        k = rotate(rmsnorm(k.reshape(B, 1, hk, D), w.k_norm, a.eps), c, s_)
        kcache[l].index_copy_(1, pos, k)
        vcache[l].index_copy_(1, pos, v.reshape(B, 1, hk, D))
        # (a KV head's group of query heads as its query rows: the memory-efficient kernel takes
        # a mask but not grouped heads)
        qg = q.transpose(1, 2).reshape(B, hk, hq // hk, D)
        with sdpa_kernel(GRAPH_BACKENDS):
            o = F.scaled_dot_product_attention(qg, kcache[l].transpose(1, 2), vcache[l].transpose(1, 2),
                                               attn_mask=mask)
        h = h + all_reduce(F.linear(o.reshape(B, hq * D), w.wo))
        if a.experts:
            return h + all_reduce(moe(rmsnorm(h, w.post_norm, a.eps), w, a.topk))
        g, u = F.linear(rmsnorm(h, w.post_norm, a.eps), w.w13).chunk(2, dim=-1)
        return h + all_reduce(F.linear(F.silu(g) * u, w.w2))

    def graph_steps(eager_out):  # the steps again, each a replay of one captured graph
        pos = torch.full((1,), S, dtype=torch.int64, device="cuda")
        h_in = steps_in[0].clone()
        rows = torch.arange(max_len, device="cuda")

        def static_step():
            c, s_ = dcos.index_select(0, pos - S), dsin.index_select(0, pos - S)
            mask = (rows <= pos).view(1, 1, 1, max_len)
            h = h_in
            for l, w in enumerate(layers):
                h = graph_layer(h, w, l, pos, c, s_, mask)
            return h

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                static_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            h_out = static_step()
        times = []
        for t in range(a.steps):
            pos.fill_(S + t)
            h_in.copy_(steps_in[t])
            if n > 1:
                dist.barrier()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        times.sort()
        diff = (h_out.float() - eager_out.float()).norm() / eager_out.float().norm().clamp_min(1e-30)
        return times[len(times) // 2], diff.item()

    if decoding:  # (the rotary angles of the steps' positions, as the prompt's)
        dfreqs = torch.arange(S, max_len, device="cuda").float()[:, None] * inv_freq[None, :]
        demb = torch.cat([dfreqs, dfreqs], dim=-1)
        dcos, dsin = demb.cos().to(torch.bfloat16), demb.sin().to(torch.bfloat16)

    with torch.inference_mode():
        out = step()
        if decoding:
            times = []
            for t in range(a.steps):
                if n > 1:
                    dist.barrier()
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                h = steps_in[t]
                for l, w in enumerate(layers):
                    h = decode_layer(h, w, l, S + t)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
                out = h
            if a.out:
                host = out.float().contiguous().cpu()
                with open(a.out, "wb") as f:
                    f.write(ctypes.string_at(host.data_ptr(), host.numel() * 4))
            times.sort()
            print(f"ms {times[len(times) // 2]:.4f}")
            if a.graph:
                try:
                    graph_ms, graph_error = graph_steps(out)
                    print(f"graph_ms {graph_ms:.4f}")
                    print(f"graph_error {graph_error:.3g}")
                except Exception as e:  # (the eager steps' figures stand without it)
                    print(f"model_baseline.py: no CUDA graph: {e}", file=sys.stderr)
            if n > 1:
                dist.destroy_process_group()
            return
        if a.out:
            host = out.float().contiguous().cpu()
            with open(a.out, "wb") as f:
                f.write(ctypes.string_at(host.data_ptr(), host.numel() * 4))
        before = (lambda: dist.barrier()) if n > 1 else None
        ms = median_ms(step, 2, a.reps, before)
    print(f"ms {ms:.4f}")
    if n > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
