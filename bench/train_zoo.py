"""Training speed of `kiln train MODEL.onnx` against PyTorch on torchvision models, in one GPU call.

For each model (random weights, 1000 classes): torch.onnx.export in training mode without
constant folding (BatchNormalization and Dropout kept as nodes: docs/train.md; folding in
eval mode would merge BN into the convolutions and leave a network without it), dynamic
batch, 224x224, then
  kiln:    `kiln train MODEL.onnx --data CIFAR_DIR --image-size 224 --batch B --device cuda
           --amp fp16 --epochs 2 --no-augment --classes 1000`; the second epoch's time
           (data resident on the device, the step a captured CUDA graph);
  PyTorch: the same model in train mode, channels_last, AMP fp16 with GradScaler, SGD
           momentum 0.9, weight decay 1e-4, batch B resident on the device; CUDA events
           around 30 steps after 10 warm-up steps.

    python3 bench/train_zoo.py --kiln KILN --data CIFAR_DIR [--models a,b] [--batch 128]

CIFAR_DIR holds CIFAR-10 binary files (data_batch_1.bin: N images, test_batch.bin); the
images per epoch are N. Run it through bench/common.sh's kiln_env (library path).
"""
import argparse, os, re, subprocess, tempfile, time

import torch
import torchvision

MODELS = "resnet50,mobilenet_v2,efficientnet_b0,densenet121,regnet_y_400mf,shufflenet_v2_x1_0"


def build(name):
    kw = {"aux_logits": False, "init_weights": False} if name in ("googlenet", "inception_v3") else {}
    return getattr(torchvision.models, name)(num_classes=1000, **kw)


def torch_img_s(m, batch, steps=30, warm=10):
    m = m.cuda().to(memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    crit = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = crit(m(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(warm):
        step()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(steps):
        step()
    b.record()
    torch.cuda.synchronize()
    return batch * steps * 1e3 / a.elapsed_time(b)


def kiln_img_s(kiln, path, data, batch, images, log, extra=()):
    """extra: kiln train arguments; NAME=VALUE words among them set the environment instead."""
    env = dict(os.environ)
    setting = [w for w in extra if re.match(r"^[A-Z_][A-Z0-9_]*=", w)]
    env.update(w.split("=", 1) for w in setting)
    extra = [w for w in extra if w not in setting]
    cmd = [kiln, "train", path, "--data", data, "--image-size", "224", "--batch", str(batch), "--device", "cuda",
           "--amp", "fp16", "--epochs", "2", "--no-augment", "--classes", "1000", *extra]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env)
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n" + p.stdout + p.stderr)
    ep = re.findall(r"^epoch 2: ([0-9.]+) s", p.stdout, re.M)
    if p.returncode or not ep:
        last = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or ["?"]
        return None, f"rc={p.returncode}: {last[0][:400]}", time.time() - t0
    steps = images // batch
    return steps * batch / float(ep[0]), "", time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--images", type=int, default=0,
                    help="training images in CIFAR_DIR (default: counted from its data_batch_*.bin records)")
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--variant", action="append", default=[],
                    help="kiln train arguments of a variant (e.g. '--disable fuse-pool'; NAME=VALUE words set "
                         "the environment, e.g. 'KILN_CUDA_CONV_GRAPH=0'), timed after the default run in the "
                         "same call and printed as its own column; repeatable")
    args = ap.parse_args()
    if not args.images:  # 3,073 bytes a record (a label byte and 32x32x3 pixels)
        args.images = sum(os.path.getsize(os.path.join(args.data, f)) // 3073 for f in os.listdir(args.data)
                          if f.startswith("data_batch") and f.endswith(".bin"))
    torch.backends.cudnn.benchmark = True
    out = os.environ.get("OUT", tempfile.gettempdir())
    tmp = tempfile.mkdtemp()
    rows = []
    head = "".join(f" {'variant ' + str(i + 1):>11s}" for i in range(len(args.variant)))
    for i, v in enumerate(args.variant):
        print(f"variant {i + 1}: kiln train ... {v}")
    print(f"{'model':22s} {'kiln img/s':>11s}{head} {'torch img/s':>12s} {'ratio':>6s}  note", flush=True)
    for name in args.models.split(","):
        m = build(name)
        path = os.path.join(tmp, name + ".onnx")
        torch.onnx.export(m, (torch.randn(2, 3, 224, 224),), path, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        k, why, secs = kiln_img_s(args.kiln, path, args.data, args.batch, args.images,
                                  os.path.join(out, f"train_zoo_{name}.log"))
        vs = []
        for i, v in enumerate(args.variant):
            kv, vwhy, _ = kiln_img_s(args.kiln, path, args.data, args.batch, args.images,
                                     os.path.join(out, f"train_zoo_{name}_v{i + 1}.log"), v.split())
            vs.append(f" {kv or 0:11.0f}")
            why += vwhy
        t = torch_img_s(m, args.batch)
        torch.cuda.empty_cache()
        ratio = f"{k / t:6.2f}" if k else "     -"
        print(f"{name:22s} {k or 0:11.0f}{''.join(vs)} {t:12.0f} {ratio}  {why}(kiln run {secs:.0f} s)", flush=True)
        rows.append((name, k, t))
    ok = [k / t for _, k, t in rows if k]
    if ok:
        g = 1.0
        for r in ok:
            g *= r
        print(f"geometric mean kiln/torch over {len(ok)} models: {g ** (1 / len(ok)):.2f}")


if __name__ == "__main__":
    main()
