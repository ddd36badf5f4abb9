"""The CUDA pass pipeline on whole models, without a GPU: each torchvision model (random
weights, eval mode, BatchNorm statistics randomized so that folds matter) is exported to ONNX,
rewritten by `kiln convert --device cuda` (fp32: layouts, fusions, attention, everything the
CUDA backend's passes do, written back as standard ONNX), and onnxruntime runs the original
and kiln's file on the same input: max |diff| <= 1e-4 max |ref| + 1e-5.

    /tmp/tv/bin/tpy bench/cuda_passes_cpu.py --kiln build/kiln [--models a,b,...|all] [--fp16]

--models takes names and bench/zoo_all.py's groups (all, classification, segmentation: the
whole torchvision zoo but its two largest). --fp16 also converts with --fp16 (Casts placed by
the precision pass) and compares at 2e-2. Exports are kept in --cache (default /tmp/zoo_onnx)
between runs; --drop deletes each model's files once it is checked (the whole zoo is ~20 GB).
A model that fails to export, convert or run is reported and the rest go on.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

MODELS = ("resnet50,densenet121,convnext_tiny,efficientnet_b0,mobilenet_v3_large,regnet_y_400mf,"
          "shufflenet_v2_x1_0,googlenet,squeezenet1_1,mnasnet1_0,resnext50_32x4d,inception_v3,"
          "vit_b_16,swin_t,swin_v2_t,maxvit_t,fcn_resnet50,deeplabv3_mobilenet_v3_large,lraspp_mobilenet_v3_large")


def export(name, path):
    import torch
    import torchvision
    torch.manual_seed(0)
    kw = {}
    if name in ("googlenet", "inception_v3"):
        kw = {"aux_logits": False, "init_weights": False}
    seg = name.startswith(("fcn_", "deeplabv3_", "lraspp_"))
    if seg:
        kw["weights_backbone"] = None
        if not name.startswith("lraspp"):
            kw["aux_loss"] = False
        m = getattr(torchvision.models.segmentation, name)(**kw)
    else:
        m = getattr(torchvision.models, name)(**kw)
    for mod in m.modules():  # trained-like BatchNorm statistics and a non-zero head
        if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
            with torch.no_grad():
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.5, 0.5)
    for mod in m.modules():
        if isinstance(mod, torch.nn.Linear) and mod.weight.abs().max() == 0:
            torch.nn.init.normal_(mod.weight, std=0.05)
    m.eval()
    size = 299 if name == "inception_v3" else 224
    torch.onnx.export(m, (torch.randn(1, 3, size, size),), path, dynamo=False, opset_version=17, input_names=["x"],
                      output_names=["y"] if not seg else None, dynamic_axes={"x": {0: "b"}})
    return size


def ort_run(path, x):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3  # errors only (unused-initializer warnings flood the log)
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--cache", default="/tmp/zoo_onnx")
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--drop", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import zoo_all
    names = zoo_all.pick(a.models)
    os.makedirs(a.cache, exist_ok=True)
    rng = np.random.default_rng(0)
    bad = 0
    for name in names:
        src = os.path.join(a.cache, name + ".onnx")
        size = 299 if name == "inception_v3" else 224
        try:
            if not os.path.exists(src):
                export(name, src)
            x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
            want = ort_run(src, x)
        except Exception as e:  # an export or onnxruntime failure: this model only
            print("%-32s FAIL export / onnxruntime: %s" % (name, str(e).strip()[-300:]), flush=True)
            bad += 1
            continue
        for tag, flags, tol in (("fp32", [], 1e-4),) + ((("fp16", ["--fp16"], 2e-2),) if a.fp16 else ()):
            out = os.path.join(a.cache, "%s_cuda_%s.onnx" % (name, tag))
            t = time.time()
            r = subprocess.run([a.kiln, "convert", src, out, "--device", "cuda"] + flags, capture_output=True, text=True)
            if r.returncode:
                print("%-32s %s FAIL convert: %s" % (name, tag, r.stderr.strip()[-300:]))
                bad += 1
                continue
            try:
                got = ort_run(out, x)
            except Exception as e:
                print("%-32s %s FAIL onnxruntime on kiln's file: %s" % (name, tag, str(e).strip()[-300:]), flush=True)
                bad += 1
                continue
            err = float(np.abs(got.astype(np.float64) - want).max()) if got.shape == want.shape else float("inf")
            ref = float(np.abs(want).max())
            ok = err <= tol * ref + 1e-5
            bad += not ok
            print("%-32s %s %s  max|diff| %.3g of max|ref| %.3g (%s -> %s)  %.1f s" % (
                name, tag, "ok  " if ok else "FAIL", err, ref, r.stdout.strip().split("(")[1].split(")")[0],
                r.stdout.strip().split("(")[-1].rstrip(")"), time.time() - t), flush=True)
        if a.drop:
            for f in [src] + [os.path.join(a.cache, "%s_cuda_%s.onnx" % (name, t)) for t in ("fp32", "fp16")]:
                if os.path.exists(f):
                    os.remove(f)
    print("%d failed" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
