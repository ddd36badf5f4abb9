"""Stem convolutions (few input channels, 3x3 or 7x7, stride 2, at 224x224) one at a time:
kiln's time for each against PyTorch's, to find which shapes cuDNN runs badly.

mobilenet_v3_large's stem (Conv 3->16 3x3 s2 + BN + Hardswish) took 2.57 ms of its 6.63 ms
at batch 256 fp16 on an H100 (bench/NOTES.md), efficientnet_b0's (3->32, SiLU) 0.40 ms.
Each row: one Conv (+ activation) exported alone, `kiln bench --fp16 --profile` on it
(each of VARIANTS: default, conv.c's narrow copy never / always, some --disable), and
PyTorch eager fp16 channels_last (cuDNN, benchmark mode on) on the same module, CUDA events
around 50 calls after warm-up. `--set dw`: convnext_tiny's depthwise 7x7 forwards instead,
kiln's default (its own kernels or cuDNN, timed) against cuDNN alone; `--set dw3` the same
for the 3x3 and 5x5 depthwise forwards of mobilenet_v2, efficientnet_b0 and shufflenet_v2.

    python3 bench/stem_probe.py --kiln KILN [--batch 256] [--set stems|dw|dw3]

Run through bench/common.sh's kiln_env (library path).
"""
import argparse, os, re, subprocess, sys, tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402 (bench/zoo.py: PyTorch's timing)


SHAPES = [  # name, in, out, kernel, stride, pad, activation (groups 1, 224x224)
    ("mnv3 stem 3->16 3x3 s2 hardswish", 3, 16, 3, 2, 1, "hardswish"),
    ("3->16 3x3 s2 relu", 3, 16, 3, 2, 1, "relu"),
    ("effnet stem 3->32 3x3 s2 silu", 3, 32, 3, 2, 1, "silu"),
    ("3->24 3x3 s2 relu (shufflenet)", 3, 24, 3, 2, 1, "relu"),
    ("3->64 7x7 s2 relu (resnet)", 3, 64, 7, 2, 3, "relu"),
    ("3->96 4x4 s4 (convnext)", 3, 96, 4, 4, 0, None),
    ("3->768 16x16 s16 (vit_b_16)", 3, 768, 16, 16, 0, None),
]
# --set dw: convnext_tiny's depthwise 7x7 forwards (channels, size), one module each
DW = [("convnext dw 7x7 %d@%d" % (c, hw), c, hw) for c, hw in ((96, 56), (192, 28), (384, 14), (768, 7))]
# each column: a --disable of kiln bench, and the environment it runs with (conv.c's
# narrow copy of channel-padded convolutions: timed by default, =0 never, =1 always)
VARIANTS = [("default", None, {}), ("narrow=0", None, {"KILN_CUDA_NARROW_CHANNELS": "0"}),
            ("narrow=1", None, {"KILN_CUDA_NARROW_CHANNELS": "1"}), ("no pad-channels", "pad-channels", {}),
            ("no nhwc", "nhwc", {})]
# --set dw3: the small CNNs' depthwise forwards (name, channels, size, kernel, stride), no
# activation (the convolution alone on both sides): mobilenet_v2 / efficientnet_b0 /
# shufflenet_v2's shapes
DW3 = [("mnv2 dw3 %d@%d s%d" % (c, hw, s), c, hw, 3, s) for c, hw, s in
       ((32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (384, 14, 1), (576, 14, 1), (960, 7, 1))]
DW3 += [("effnet dw5 %d@%d s%d" % (c, hw, s), c, hw, 5, s) for c, hw, s in ((144, 56, 2), (240, 28, 1), (672, 14, 1))]
DW3 += [("shufflenet dw3 %d@%d s%d" % (c, hw, s), c, hw, 3, s) for c, hw, s in ((58, 56, 2), (58, 28, 1), (116, 14, 1), (232, 7, 1))]
DW_VARIANTS = [("default", None, {}), ("cuDNN (no conv-depthwise)", "conv-depthwise", {})]


def module(cin, cout, k, s, pad, act, groups=1):
    conv = torch.nn.Conv2d(cin, cout, k, s, pad, bias=True, groups=groups)
    a = {"hardswish": torch.nn.Hardswish(), "relu": torch.nn.ReLU(), "silu": torch.nn.SiLU(), None: torch.nn.Identity()}[act]
    return torch.nn.Sequential(conv, a).eval()


def torch_ms(m, batch, cin, hw=224):
    """PyTorch eager fp16 channels_last, cuDNN benchmark mode (bench/zoo.py's timing)."""
    torch.backends.cudnn.benchmark = True
    return zoo.torch_ms(m, batch, cin, hw)


def kiln_ms(kiln, path, batch, disable, env):
    cmd = [kiln, "bench", path, "--device", "cuda", "--batch", str(batch), "--fp16", "--iters", "30", "--warmup", "5",
           "--profile"]
    if disable:
        cmd += ["--disable", disable]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **env))
    out = p.stdout + p.stderr
    ms = re.search(r"GPU compute[^\n]*?median\s+([0-9.]+)", out)
    # the profile's rows: the convolution's own time, without the input's conversion
    rows = re.findall(r"^\s+\d+\s+([0-9.]+)\s+[0-9.]+%\s+\S+\s+\S+\s+(\S+)", out, re.M)
    conv = [float(t) for t, op in rows if "Conv" in op]
    return (float(ms.group(1)) if ms else None), (sum(conv) if conv else None), " ".join(op for _, op in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--set", choices=["stems", "dw", "dw3"], default="stems")
    a = ap.parse_args()
    d = tempfile.mkdtemp()
    if a.set == "dw":  # name, module, input channels and size
        rows, variants = [(n, module(c, c, 7, 1, 3, None, groups=c), c, hw) for n, c, hw in DW], DW_VARIANTS
    elif a.set == "dw3":
        rows, variants = [(n, module(c, c, k, s, k // 2, None, groups=c), c, hw) for n, c, hw, k, s in DW3], DW_VARIANTS
    else:
        rows, variants = [(n, module(ci, co, k, s, p, act), ci, 224) for n, ci, co, k, s, p, act in SHAPES], VARIANTS
    print("%-34s %9s %9s  %s" % ("shape", "torch ms", "kiln ms", "kiln conv ms (" + ", ".join(v[0] for v in variants) + ")"))
    for name, m, cin, hw in rows:
        path = os.path.join(d, "probe.onnx")
        torch.onnx.export(m, (torch.randn(2, cin, hw, hw),), path, dynamo=False, opset_version=17, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
        t = torch_ms(m, a.batch, cin, hw)
        cells, total = [], None
        for label, dis, env in variants:
            whole, conv, ops = kiln_ms(a.kiln, path, a.batch, dis, env)
            if label == "default":
                total = whole
            cells.append("%s" % ("%.3f" % conv if conv is not None else "-"))
        print("%-34s %9.3f %9s  %s   (ops: %s)" % (name, t, "%.3f" % total if total else "-", " ".join(cells), ops),
              flush=True)


if __name__ == "__main__":
    main()
