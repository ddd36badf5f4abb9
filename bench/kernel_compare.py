"""Where a model's inference time goes in kiln and in torch.compile, side by side.

For each model (torchvision, random weights, eval mode, exported with torch.onnx.export,
dynamic batch): `kiln bench --fp16 --profile` (kiln's per-node table, each node timed
alone) and torch.compile (fp16, channels_last, mode "default") under torch.profiler: the
CUDA kernels of ITERS calls grouped by name, per call in microseconds, largest first.
The two columns are not node for node (inductor fuses differently); they say which kinds
of work one side does faster, so a change is aimed at a measured gap, not a guess.

    python3 bench/kernel_compare.py --kiln KILN --models mobilenet_v2,shufflenet_v2_x1_0 [--batch 256] [--top 25]

On the GPU machine through bench/common.sh's kiln_env (library path). Needs torch,
torchvision.
"""
import argparse, os, subprocess, sys, tempfile

import torch
import torchvision


def export(name, path):
    m = torchvision.models.get_model(name, weights=None).eval()
    torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), path, dynamo=False, opset_version=17, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    return m


def kiln_profile(kiln, path, batch, top):
    cmd = [kiln, "bench", path, "--device", "cuda", "--batch", str(batch), "--fp16", "--iters", "30", "--warmup", "5",
           "--profile"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    lines = (p.stdout + p.stderr).splitlines()
    at = next((i for i, l in enumerate(lines) if l.startswith("per-layer profile")), None)
    if at is None:
        return "\n".join(lines[-20:])
    head = [l for l in lines[:at] if l.startswith("GPU compute")] if top == 0 else lines[:at]
    return "\n".join(head + ([l[:200] for l in lines[at:at + 4 + top]] if top else []))


def compile_profile(m, batch, iters, top):
    m = m.half().cuda().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    f = torch.compile(m, mode="default", dynamic=False)
    with torch.inference_mode():
        for _ in range(3):
            f(x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            f(x)
        end.record()
        torch.cuda.synchronize()
        per_call = start.elapsed_time(end) / iters
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                f(x)
            torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = e.name[:90]
            t, n = rows.get(k, (0.0, 0))
            rows[k] = (t + e.device_time, n + 1)  # device_time: microseconds
    total = sum(t for t, _ in rows.values()) / iters
    out = ["torch.compile %.3f ms a call (events); kernels %.1f us a call, by name:" % (per_call, total)]
    for k, (t, n) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:max(top, 0)]:
        out.append("  %9.1f us  %4d x  %s" % (t / iters, n // iters, k))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", default="mobilenet_v2,shufflenet_v2_x1_0,efficientnet_b0")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--top", type=int, default=25, help="rows of each table (0: the totals only)")
    ap.add_argument("--no-compile", action="store_true", help="kiln alone")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            path = os.path.join(tmp, name + ".onnx")
            m = export(name, path)
            print("=== %s, batch %d, fp16" % (name, a.batch))
            print("--- kiln bench --profile")
            print(kiln_profile(a.kiln, path, a.batch, a.top))
            if not a.no_compile:
                print("--- torch.compile")
                print(compile_profile(m, a.batch, a.iters, a.top), flush=True)


if __name__ == "__main__":
    sys.exit(main())
