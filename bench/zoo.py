"""One or two kiln builds and PyTorch on a sample of the torchvision zoo, in one GPU call.

Each model (random weights, eval mode) is exported with torch.onnx.export (dynamo=False,
opset 17, dynamic batch), then timed at one batch size in fp16: each kiln build with
`kiln bench --fp16` (GPU compute: events around CUDA-graph replays, inputs resident; the
builds share one algorithm cache, filled by the first, so they run the same cuDNN
choices), and PyTorch eager fp16 channels_last (events around calls, inputs resident,
median of 50 after 10 warm-up). Also prints each build's "nodes run / folded" counts:
equal counts mean the passes made the same rewrites.

    python3 bench/zoo.py --kiln A [--kiln B] [--models m1,m2] [--batch 64]

Run through bench/common.sh's kiln_env (library path) with the kilns unpacked.
"""
import argparse, os, re, statistics, subprocess, tempfile

import torch
import torchvision

MODELS = ("resnet50,mobilenet_v3_large,efficientnet_b0,densenet121,shufflenet_v2_x1_0,"
          "convnext_tiny,regnet_y_400mf,squeezenet1_1,googlenet")


def export(name, path):
    """torchvision's model `name` (classification or segmentation, built as bench/zoo_all.py
    builds the table's: segmentation's "out", random weights) to ONNX at 224x224."""
    import zoo_all
    m = zoo_all.build(name)[0].eval()
    torch.onnx.export(m, (torch.randn(2, 3, 224, 224),), path, dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    return m


def torch_ms(m, batch, channels=3, hw=224):
    m = m.cuda().half().to(memory_format=torch.channels_last)
    x = torch.randn(batch, channels, hw, hw, device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    ts = []
    with torch.inference_mode():
        for i in range(60):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            m(x)
            b.record()
            b.synchronize()
            if i >= 10:
                ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def kiln_run(kiln, path, batch, cache):
    env = dict(os.environ, KILN_CACHE_DIR=cache)
    p = subprocess.run([kiln, "bench", path, "--device", "cuda", "--batch", str(batch), "--fp16", "--iters", "50",
                        "--warmup", "5"], capture_output=True, text=True, env=env)
    out = p.stdout + p.stderr
    ms = re.search(r"GPU compute[^\n]*?median\s+([0-9.]+)", out)
    nodes = re.search(r"\((\d+) nodes run, (\d+) folded", out)
    if not ms:
        return None, (out.strip().splitlines() or ["no output"])[-1][:90]
    return float(ms.group(1)), "%s/%s" % nodes.groups() if nodes else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", action="append", required=True)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    cache = os.path.join(tmp, "cache")
    os.makedirs(cache)
    names = ["A", "B"][:len(a.kiln)]
    print("model               " + "".join("%-10s %-9s " % (n + " ms", n + " nodes") for n in names) +
          ("B/A    " if len(names) == 2 else "") + "torch ms  torch/kiln (last build)")
    for name in a.models.split(","):
        path = os.path.join(tmp, name + ".onnx")
        try:
            m = export(name, path)
        except Exception as e:  # a model this torchvision lacks, or an export failure
            print("%-19s export failed: %s" % (name, str(e)[:80]))
            continue
        res = [kiln_run(k, path, a.batch, cache) for k in a.kiln]
        t = torch_ms(m, a.batch)
        line = "%-19s " % name + "".join("%-10s %-9s " % ("%.3f" % ms if ms else "-", info if ms else "")
                                          for ms, info in res)
        if len(res) == 2:
            line += "%-6s " % ("%.3f" % (res[1][0] / res[0][0]) if res[0][0] and res[1][0] else "-")
        last = res[-1][0]
        line += "%-9.3f %s" % (t, "%.2f" % (t / last) if last else "-")
        print(line, flush=True)
        for ms, info in res:
            if ms is None:
                print("    %s" % info)


if __name__ == "__main__":
    main()
