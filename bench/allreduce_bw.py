"""NCCL all-reduce bus bandwidth on this host, the ceiling of data-parallel training
(issue 15), measured as nccl-tests' all_reduce_perf defines it:

    torchrun --nproc_per_node N bench/allreduce_bw.py [--mib 1024] [--iters 20]

Each rank all-reduces (sum) a float32 buffer of --mib MiB; time = median of --iters calls
after 5 warm-up calls, CUDA events around each; algorithm bandwidth = bytes / time, bus
bandwidth = algbw x 2 (N - 1) / N. Rank 0 prints both. NCCL's environment (e.g.
NCCL_NVLS_ENABLE=0) applies as to kiln."""
import argparse
import os
import statistics

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--mib", type=int, default=1024)
ap.add_argument("--iters", type=int, default=20)
a = ap.parse_args()
local = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local)
dist.init_process_group("nccl")
n = dist.get_world_size()
x = torch.ones(a.mib * 1024 * 1024 // 4, device="cuda")
ts = []
for i in range(5 + a.iters):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    dist.all_reduce(x)
    e.record()
    e.synchronize()
    if i >= 5:
        ts.append(s.elapsed_time(e) / 1e3)
t = statistics.median(ts)
algbw = x.numel() * 4 / t / 1e9
if dist.get_rank() == 0:
    print(f"all-reduce {a.mib} MiB f32 on {n} GPUs: {t * 1e3:.2f} ms, algbw {algbw:.1f} GB/s, "
          f"busbw {algbw * 2 * (n - 1) / n:.1f} GB/s")
dist.destroy_process_group()
