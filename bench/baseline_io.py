"""What the PyTorch sides of the GPU benchmarks share (attention_baseline.py,
grouped_gemm_baseline.py): raw bf16 files in and out, and the median of CUDA-event timings."""
import torch


def read_bf16(path, count):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if len(data) != 2 * count:
        raise SystemExit(f"{path}: {len(data)} bytes, want {2 * count}")
    return torch.frombuffer(data, dtype=torch.bfloat16)


def write_bf16(path, t):
    with open(path, "wb") as f:
        f.write(bytes(t.cpu().contiguous().view(torch.uint8).flatten().tolist()))


def median_ms(fn, warmup, reps, before=None):
    """The median of `reps` single calls of `fn`, each timed with CUDA events, after `warmup`
    untimed ones (as the C++ side times ours); `before`, where given, runs untimed ahead of
    each timed call (a barrier)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if before:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]
