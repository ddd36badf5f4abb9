"""What cuDNN (through PyTorch, cudnn.benchmark on, fp16 channels_last) does for a torchvision
model's convolutions in training: forward, backward-data and backward-filter of every distinct
convolution, each timed as 20 calls captured in one CUDA graph, median of 9 replays. Totals
are weighted by how often each convolution occurs, so they compare with the Conv,
ConvGradInput and ConvGradWeight rows of `kiln train ... --profile`.

    python3 bench/conv_train_probe.py --model resnet50 --batch 256
"""
import argparse
import collections

import torch
import torchvision

from conv_probe import graph_time  # 20 calls in a CUDA graph, median of 9 replays here

torch.backends.cudnn.benchmark = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    a = ap.parse_args()
    m = getattr(torchvision.models, a.model)(num_classes=1000).cuda().half().to(memory_format=torch.channels_last)
    seen = collections.OrderedDict()

    def hook(mod, inp, out):
        key = (tuple(inp[0].shape), tuple(mod.weight.shape), mod.stride, mod.padding, mod.dilation, mod.groups)
        seen.setdefault(key, [0, mod._probe_name])[0] += 1

    hs = []
    for name, mod in m.named_modules():
        if isinstance(mod, torch.nn.Conv2d):
            mod._probe_name = name
            hs.append(mod.register_forward_hook(hook))
    with torch.no_grad():
        m(torch.randn(a.batch, 3, a.size, a.size, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last))
    for h in hs:
        h.remove()
    tot = [0.0, 0.0, 0.0]
    flops_tot = 0.0
    print(f"{a.model} batch {a.batch} fp16 channels_last, cudnn.benchmark; us per call")
    print(f"{'count':>5} {'fwd':>8} {'dgrad':>8} {'wgrad':>8} {'TF/s fwd':>8}  first node / input / weight / stride")
    for (xs, ws, st, pad, dil, gr), (cnt, name) in seen.items():
        x = torch.randn(xs, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
        w = torch.randn(ws, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last) * 0.05
        y = torch.nn.functional.conv2d(x, w, None, st, pad, dil, gr)
        dy = torch.randn_like(y)
        args = (None, st, pad, dil, False, [0, 0], gr)
        f = graph_time(lambda: torch.nn.functional.conv2d(x, w, None, st, pad, dil, gr), 20, 9)
        d = graph_time(lambda: torch.ops.aten.convolution_backward(dy, x, w, *args, [True, False, False]), 20, 9)
        wg = graph_time(lambda: torch.ops.aten.convolution_backward(dy, x, w, *args, [False, True, False]), 20, 9)
        fl = 2.0 * y.numel() * ws[1] * ws[2] * ws[3]
        flops_tot += fl * cnt
        tot[0] += f * cnt
        tot[1] += d * cnt
        tot[2] += wg * cnt
        print(f"{cnt:5d} {f:8.1f} {d:8.1f} {wg:8.1f} {fl / f / 1e6:8.0f}  {name} {list(xs)} {list(ws)} {st}")
    print(f"total ms: forward {tot[0] / 1e3:.2f}  backward-data {tot[1] / 1e3:.2f}  backward-filter {tot[2] / 1e3:.2f}"
          f"  all {sum(tot) / 1e3:.2f}  (forward {flops_tot / 1e12:.2f} TFLOP, {flops_tot / tot[0] / 1e6:.0f} TFLOP/s)")


if __name__ == "__main__":
    main()
