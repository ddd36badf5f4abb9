"""Which pass breaks a model in fp16 on CUDA? Exports a torchvision model, runs kiln with
each pass switched off in turn (kiln run --disable) and prints the max relative error
against PyTorch fp32 for each. Usage: python3 bench/diag_fp16.py --kiln K [--model mobilenet_v2]"""
import argparse, os, subprocess, tempfile
import numpy as np, torch, torchvision

ap = argparse.ArgumentParser()
ap.add_argument("--kiln", required=True)
ap.add_argument("--model", default="mobilenet_v2")
a = ap.parse_args()
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
tmp = tempfile.mkdtemp()
torch.manual_seed(0)
m = getattr(torchvision.models, a.model)().eval()
path = os.path.join(tmp, "m.onnx")
torch.onnx.export(m, (torch.randn(2, 3, 224, 224),), path, dynamo=False, input_names=["x"], output_names=["y"],
                  dynamic_axes={"x": {0: "b"}, "y": {0: "b"}}, opset_version=17)
x = np.random.default_rng(3).standard_normal((4, 3, 224, 224)).astype(np.float32)
with torch.inference_mode():
    ref = m(torch.from_numpy(x)).numpy()
np.save(os.path.join(tmp, "x.npy"), x)
for dev, prec, dis in [("cuda", "--fp32", ""), ("cpu", "--fp16", ""), ("cuda", "--fp16", ""),
                       ("cuda", "--fp16", "nhwc"), ("cuda", "--fp16", "fuse-conv"), ("cuda", "--fp16", "fuse-eltwise"),
                       ("cuda", "--fp16", "pad-channels"), ("cuda", "--fp16", "fold-bn"), ("cuda", "--fp16", "nhwc,fuse-conv"),
                       ("cuda", "--fp16", "cuda-graph"), ("cuda", "--fp16", "autotune"),
                       ("cuda", "--fp16", "fold-bn,fuse-conv,fuse-eltwise,nhwc,pad-channels")]:
    out = os.path.join(tmp, "y.npy")
    cmd = [a.kiln, "run", path, "--input", os.path.join(tmp, "x.npy"), "--output", out, "--device", dev, prec]
    if dis:
        cmd += ["--disable", dis]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        print(f"{dev:5s} {prec} disable={dis or '-':40s} ERROR {r.stderr.strip()[-200:]}", flush=True)
        continue
    y = np.load(out)
    err = float(np.abs(y - ref).max() / np.abs(ref).max())
    print(f"{dev:5s} {prec} disable={dis or '-':40s} max rel err {err:.3e}  top1 {float((y.argmax(1) == ref.argmax(1)).mean()):.2f}"
          f"  nan {int(np.isnan(y).sum())}", flush=True)
