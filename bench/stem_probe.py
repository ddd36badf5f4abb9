"""Stem convolutions (few input channels, 3x3 or 7x7, stride 2, at 224x224) one at a time:
kiln's time for each against PyTorch's, to find which shapes cuDNN runs badly.

mobilenet_v3_large's stem (Conv 3->16 3x3 s2 + BN + Hardswish) took 2.57 ms of its 6.63 ms
at batch 256 fp16 on an H100 (bench/NOTES.md), efficientnet_b0's (3->32, SiLU) 0.40 ms.
Each row: one Conv (+ activation) exported alone, `kiln bench --fp16 --profile` on it
(default passes, then each --disable of DISABLES), and PyTorch eager fp16 channels_last
(cuDNN, benchmark mode on) on the same module, CUDA events around 50 calls after warm-up.

    python3 bench/stem_probe.py --kiln KILN [--batch 256]

Run through bench/common.sh's kiln_env (library path).
"""
import argparse, os, re, subprocess, sys, tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402 (bench/zoo.py: PyTorch's timing)

SHAPES = [  # name, in, out, kernel, stride, activation
    ("mnv3 stem 3->16 3x3 s2 hardswish", 3, 16, 3, 2, "hardswish"),
    ("3->16 3x3 s2 relu", 3, 16, 3, 2, "relu"),
    ("3->16 3x3 s2 none", 3, 16, 3, 2, None),
    ("effnet stem 3->32 3x3 s2 silu", 3, 32, 3, 2, "silu"),
    ("3->24 3x3 s2 relu (shufflenet)", 3, 24, 3, 2, "relu"),
    ("3->64 7x7 s2 relu (resnet)", 3, 64, 7, 2, "relu"),
]
DISABLES = ["pad-channels", "fuse-conv", "nhwc"]


def module(cin, cout, k, s, act):
    conv = torch.nn.Conv2d(cin, cout, k, s, k // 2, bias=True)
    a = {"hardswish": torch.nn.Hardswish(), "relu": torch.nn.ReLU(), "silu": torch.nn.SiLU(), None: torch.nn.Identity()}[act]
    return torch.nn.Sequential(conv, a).eval()


def torch_ms(m, batch, cin):
    torch.backends.cudnn.benchmark = True
    return zoo.torch_ms(m, batch, cin)


def kiln_ms(kiln, path, batch, disable):
    cmd = [kiln, "bench", path, "--device", "cuda", "--batch", str(batch), "--fp16", "--iters", "30", "--warmup", "5",
           "--profile"]
    if disable:
        cmd += ["--disable", disable]
    p = subprocess.run(cmd, capture_output=True, text=True)
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
    a = ap.parse_args()
    d = tempfile.mkdtemp()
    print("%-34s %9s %9s  %s" % ("shape", "torch ms", "kiln ms", "kiln conv ms by --disable (default, " + ", ".join(DISABLES) + ")"))
    for name, cin, cout, k, s, act in SHAPES:
        m = module(cin, cout, k, s, act)
        path = os.path.join(d, "stem.onnx")
        torch.onnx.export(m, (torch.randn(2, cin, 224, 224),), path, dynamo=False, opset_version=17, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
        t = torch_ms(m, a.batch, cin)
        cells, total = [], None
        for dis in [None] + DISABLES:
            whole, conv, ops = kiln_ms(a.kiln, path, a.batch, dis)
            if dis is None:
                total = whole
            cells.append("%s" % ("%.3f" % conv if conv is not None else "-"))
        print("%-34s %9.3f %9s  %s   (ops: %s)" % (name, t, "%.3f" % total if total else "-", " ".join(cells), ops),
              flush=True)


if __name__ == "__main__":
    main()
