"""PyTorch DDP ResNet-50 training throughput, the competitor of issue 15:

    torchrun --nproc_per_node N bench/ddp_torch.py [--batch 256] [--steps 25] [--syncbn]

torchvision resnet50, AMP fp16 + GradScaler, channels_last, cudnn.benchmark, SGD momentum
0.9 (lr 0.1, weight decay 5e-5, as bench/reference/torch_train.py), synthetic 224x224 data
resident on each GPU, DistributedDataParallel over NCCL (25 MiB buckets, PyTorch's
default). Rank 0 prints the total img/s over all ranks (median of 3 timed windows)."""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--steps", type=int, default=25)
ap.add_argument("--syncbn", action="store_true")
args = ap.parse_args()
local = int(os.environ.get("LOCAL_RANK", 0))
torch.cuda.set_device(local)
dist.init_process_group("nccl")
world = dist.get_world_size()
torch.backends.cudnn.benchmark = True
m = torchvision.models.resnet50()
if args.syncbn:
    m = torch.nn.SyncBatchNorm.convert_sync_batchnorm(m)
m = m.cuda().to(memory_format=torch.channels_last)
m = torch.nn.parallel.DistributedDataParallel(m, device_ids=[local])
opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
scaler = torch.amp.GradScaler()
x = torch.randn(args.batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (args.batch,), device="cuda")


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.cross_entropy(m(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()


for _ in range(8):
    step()
rates = []
for _ in range(3):
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.time()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    rates.append(args.batch * world * args.steps / (time.time() - t0))
if dist.get_rank() == 0:
    rates.sort()
    print(f"torch DDP resnet50 amp+cl{' syncbn' if args.syncbn else ''}: {world} GPUs, batch {args.batch} per GPU: "
          f"{rates[1]:.0f} img/s ({rates[1] / world:.0f} per GPU)", flush=True)
dist.destroy_process_group()
