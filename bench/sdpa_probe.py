#!/usr/bin/env python3
"""sdpa_probe.py — PyTorch's scaled-dot-product attention backends on the shapes that
`test_backend_ops --flash-bench` times kiln's flash kernel on (the vision transformers' attention
at the zoo's batches), so the two can be read side by side from one call on the GPU machine:

    python3 bench/sdpa_probe.py            (and: test_backend_ops --flash-bench)

For each shape and each backend (flash, efficient, cudnn, math, and PyTorch's own choice): the
median of 20 timed runs (CUDA events, after 3 untimed), ms and TFLOP/s (2 B H Lq Lk (D + Dv),
as kiln's Attention op counts them), and the output's max abs difference from the math
backend in float32 over its max (a backend that refuses the shape prints why). Q, K and V are
views of one packed (B, L, 3, H, D) tensor as the fuse-attention pass leaves ViT's
in-projection; Swin-T's stage 1 carries its relative-position bias plus the shifted-window mask
as one additive float mask (materialized: PyTorch takes one)."""
import math
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def timed(fn, iters=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def shapes():
    g = torch.Generator(device="cuda").manual_seed(0)
    dt = torch.float16
    for name, B, H, L, D in (("vit_b_16 bs256", 256, 12, 197, 64), ("vit_b_32 bs256", 256, 12, 50, 64),
                             ("vit_l_16 bs128", 128, 16, 197, 64), ("vit_h_14 bs128", 128, 16, 257, 80)):
        qkv = torch.rand(B, L, 3, H, D, device="cuda", dtype=dt, generator=g) * 2 - 1
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, H, L, D) views
        yield name, q, k, v, None
    B, H, Lw, D, nW = 4096, 3, 49, 32, 64
    qkv = torch.rand(3, B, H, Lw, D, device="cuda", dtype=dt, generator=g) * 2 - 1
    bias = torch.rand(H, Lw, Lw, device="cuda", generator=g) * 4 - 2
    mask = torch.rand(nW, 1, Lw, Lw, device="cuda", generator=g) * 3 - 3
    m = (bias[None, None] + mask[None]).expand(B // nW, nW, H, Lw, Lw).reshape(B, H, Lw, Lw).to(dt)
    yield "swin_t s1 bs64 (bias)", qkv[0], qkv[1], qkv[2], m
    q, k, v = (torch.rand(32, 12, 1024, 64, device="cuda", dtype=dt, generator=g) * 2 - 1 for _ in range(3))
    yield "long seq (32x12, 1024)", q, k, v, None


def main():
    print("torch %s, cuDNN %s, %s" % (torch.__version__, torch.backends.cudnn.version(), torch.cuda.get_device_name()))
    backends = (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH), ("default", None))
    print("%-24s %-10s %9s %8s %10s" % ("shape", "backend", "ms", "TFLOP/s", "rel diff"))
    for name, q, k, v, m in shapes():
        B, H, L, D = q.shape
        flop = 2.0 * B * H * L * k.shape[2] * (D + v.shape[3])
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=None if m is None else m.float())
        for bname, be in backends:
            fn = lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa: E731
            try:
                if be is None:
                    y = fn()
                    ms = timed(fn)
                else:
                    with sdpa_kernel([be]):
                        y = fn()
                        ms = timed(fn)
                err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
                print("%-24s %-10s %9.4f %8.1f %10.2e" % (name, bname, ms, flop / ms / 1e9, err))
            except Exception as e:  # a backend that does not take the shape
                print("%-24s %-10s %9s %8s %10s  %s" % (name, bname, "-", "-", "-", str(e).splitlines()[0][:90]))
            sys.stdout.flush()
        del q, k, v, m, ref
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
