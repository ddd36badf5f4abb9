"""Which torchvision classification models `kiln train MODEL.onnx` trains: a CPU sweep.

For every name in torchvision.models.list_models(module=torchvision.models) (random
weights, 10 classes), export for training as bench/train_zoo.py does (torch.onnx.export in
training mode, no constant folding, dynamic batch), at the smallest side from SIZES that the
model accepts (batch 2 through PyTorch first), then run

    kiln train MODEL.onnx --data DIR --image-size S --batch 2 --max-steps 2 --no-augment --threads T

on the CPU, DIR a tiny generated image folder (4 classes, 4 training and 2 test PNGs each).
A model is ok when kiln exits 0 after its steps with a finite loss. The markdown table
(model, side, parameters, result: the last loss or kiln's error) goes to stdout and --table.

    python3 bench/train_zoo_cpu.py --kiln build/kiln [--models a,b] [--size 64] [--table t.md] [--match]

--match also checks the numbers against PyTorch: Dropout and stochastic depth set to p = 0
(their draws cannot match; the random ops themselves are covered by kiln's own tests), the
data in kiln's order (--no-shuffle, images already S x S, --resize S: the transforms leave
them as they are, then ImageNet's normalization), SGD lr 0.01 momentum 0.9 weight decay
1e-4 with a constant schedule in both; the first step's loss (the initial weights: the
forward) and the second's (after one update: the gradients) must agree within 2e-3 + 1e-2
of PyTorch's (the second may be ~0). Not tighter: at batch 2 a BatchNormalization in training mode over a 1x1 or 2x2
map (the last blocks at a side of 64-96) normalizes over 2-8 values, which amplifies fp32
rounding; onnxruntime's forward of inception_v3 at 96 differs from PyTorch's by 1.6e-3 of
the logits' range there, kiln's by 1.2e-3, both by ~1e-4 at 160. The result column gives
the losses and the largest share of the tolerance used.

Left out (by name, with the reason in SKIP): the models over ~250M parameters, whose export
and CPU steps take minutes each on a small machine and which add no op the smaller
members of their families lack.
"""
import argparse, math, os, re, subprocess, sys, tempfile, time, warnings

import numpy as np
import torch
import torchvision
from PIL import Image

SKIP = {
    "vit_h_14": "632M parameters (vit_b_16/vit_b_32 cover its ops)",
    "vit_l_16": "304M parameters (vit_b_16 covers its ops)",
    "vit_l_32": "306M parameters (vit_b_32 covers its ops)",
    "regnet_y_128gf": "645M parameters (the smaller regnet_y_* cover its ops)",
}
SIZES = (64, 96, 128, 160, 224, 299)


def build(name, size):
    kw = {"num_classes": 10}
    if name in ("googlenet", "inception_v3"):
        kw.update(aux_logits=False, init_weights=False)
    if name.startswith("vit_"):
        kw["image_size"] = size
    if name == "maxvit_t":
        kw["input_size"] = (size, size)
    return torchvision.models.get_model(name, **kw)


def export(name, smallest, path, match=False):
    """The model at the smallest side that PyTorch runs at batch 2 and exports (adaptive pools
    of an uneven ratio, AlexNet's and VGG's, do not export below 224); (model, side, why not)."""
    why = f"PyTorch rejects every side in {SIZES} at batch 2"
    for s in [x for x in SIZES if x >= smallest]:
        try:
            m = build(name, s).train()
            with torch.no_grad():
                y = m(torch.randn(2, 3, s, s))
            if tuple(y.shape) != (2, 10):
                continue
        except Exception:
            continue
        if match:
            no_randomness(m)
        try:
            torch.onnx.export(m, (torch.randn(2, 3, s, s),), path, dynamo=False, opset_version=17,
                              input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}},
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
            return m, s, ""
        except Exception as e:
            why = f"export failed at side {s}: {str(e).splitlines()[0][:200]}"
    return None, None, why


def make_data(root, side=72):
    """4 classes, 4 training and 2 test RGB PNGs each, side x side, files named in order."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 4), ("test", 2)):
        for c in range(4):
            d = os.path.join(root, split, str(c))
            os.makedirs(d, exist_ok=True)
            for i in range(n):
                a = (rng.random((side, side, 3)) * 255).astype(np.uint8)
                a[..., c % 3] //= 2
                Image.fromarray(a).save(os.path.join(d, f"{i}.png"))

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def no_randomness(m):
    for mod in m.modules():
        if isinstance(mod, (torch.nn.Dropout, torchvision.ops.StochasticDepth)):
            mod.p = 0.0
        if hasattr(mod, "stochastic_depth_prob"):
            mod.stochastic_depth_prob = 0.0


def torch_losses(m, data, size, steps):
    """PyTorch's losses of the first `steps` batches of 2 in kiln's --no-shuffle order."""
    files = []
    root = os.path.join(data, "train")
    for c in sorted(os.listdir(root), key=str):
        for f in sorted(os.listdir(os.path.join(root, c))):
            files.append((os.path.join(root, c, f), int(c)))
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    crit = torch.nn.CrossEntropyLoss()
    m.train()
    out = []
    for s in range(steps):
        batch = files[2 * s:2 * s + 2]
        x = torch.stack([torch.from_numpy(np.asarray(Image.open(f).convert("RGB"))).permute(2, 0, 1) for f, _ in batch])
        x = (x.float() / 255 - mean) / std
        y = torch.tensor([l for _, l in batch])
        opt.zero_grad()
        loss = crit(m(x), y)
        loss.backward()
        opt.step()
        out.append(float(loss))
    return out


def run_kiln(kiln, path, data, size, args, extra=()):
    cmd = [kiln, "train", path, "--data", data, "--image-size", str(size), "--batch", "2", "--max-steps",
           str(args.steps), "--no-augment", "--threads", str(args.threads)] + list(extra)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return False, f"timeout after {args.timeout} s"
    loss = re.findall(r"last loss ([-0-9.naif]+)", p.stdout)
    if p.returncode == 0 and loss and math.isfinite(float(loss[-1])):
        return True, f"loss {float(loss[-1]):.4f}"
    lines = [l for l in (p.stderr + p.stdout).splitlines() if l.startswith("kiln:") or "error" in l.lower()]
    last = lines[-1] if lines else ((p.stderr.strip() or p.stdout.strip()).splitlines() or ["?"])[-1]
    return False, f"rc={p.returncode}: {last.strip()[:300]}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", default="")
    ap.add_argument("--size", type=int, default=64, help="the smallest side tried")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--work", default="", help="folder for the exports and the data (default: a temporary one)")
    ap.add_argument("--table", default="", help="also write the markdown table here")
    ap.add_argument("--keep", action="store_true", help="keep the ONNX exports")
    ap.add_argument("--match", action="store_true", help="also compare the first losses with PyTorch's")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    work = args.work or tempfile.mkdtemp()
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "data")
    if not os.path.isdir(data):
        make_data(data)
    names = args.models.split(",") if args.models else torchvision.models.list_models(module=torchvision.models)
    rows = []
    for name in names:
        t0 = time.time()
        if name in SKIP:
            rows.append((name, "-", "-", "skipped: " + SKIP[name]))
            print(f"{name}: skipped ({SKIP[name]})", flush=True)
            continue
        path = os.path.join(work, name + ".onnx")
        m, size, why = export(name, args.size, path, args.match)
        if m is None:
            rows.append((name, "-", "-", why))
            print(f"{name}: {why}", flush=True)
            continue
        params = sum(p.numel() for p in m.parameters())
        extra = []
        if args.match:
            data = os.path.join(work, f"data{size}")
            if not os.path.isdir(data):
                make_data(data, size)
            lossfile = os.path.join(work, name + ".losses")
            extra = ["--no-shuffle", "--resize", str(size), "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9",
                     "--wd", "1e-4", "--schedule", "constant", "--losses", lossfile]
        ok, what = run_kiln(args.kiln, path, data, size, args, extra)
        if ok and args.match:
            with open(lossfile) as f:
                kl = [float(l) for l in f.read().split()][:args.steps]
            tl = torch_losses(m, data, size, args.steps)
            # |kiln - torch| <= 2e-3 + 1e-2 |torch| (the second loss may be ~0); share: the largest
            # share of that budget used
            share = (max(abs(a - b) / (2e-3 + 1e-2 * abs(b)) for a, b in zip(kl, tl))
                     if len(kl) == len(tl) else math.inf)
            ok = share <= 1
            what = (f"losses {', '.join(f'{v:.5f}' for v in kl)}; PyTorch {', '.join(f'{v:.5f}' for v in tl)}"
                    f" ({share * 100:.0f}% of the tolerance)")
        if not args.keep:
            os.remove(path)
        rows.append((name, size, params, ("ok, " if ok else "FAIL ") + what))
        print(f"{name}: {size} {'ok' if ok else 'FAIL'} {what} ({time.time() - t0:.0f} s)", flush=True)
    ok = sum(1 for r in rows if r[3].startswith("ok"))
    tried = sum(1 for r in rows if not r[3].startswith("skipped"))
    lines = ["| model | side | parameters | result |", "|---|---|---|---|"]
    for name, size, params, what in rows:
        p = f"{params / 1e6:.1f}M" if isinstance(params, int) else params
        lines.append(f"| {name} | {size} | {p} | {what.replace('|', '/')} |")
    lines.append(f"\n{ok} of {tried} models trained ({len(rows) - tried} skipped)")
    text = "\n".join(lines)
    print(text)
    if args.table:
        with open(args.table, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
