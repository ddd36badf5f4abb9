"""kiln train and PyTorch side by side on one image folder, the same recipe (issue 12's
"trained by both for 5 epochs ... test accuracy within 1 point"):

    python3 bench/train_vs_torch.py --kiln build-cuda/kiln --data FOLDER [--model resnet18]
        [--epochs 5] [--batch 128] [--image-size 28] [--label-smoothing 0] [--device cuda]

FOLDER is an ImageFolder (FOLDER/train/<class>/, FOLDER/test/<class>/), e.g. Fashion-MNIST
written by `build/tests/make_image_folder /usr/share/datasets/fashion-mnist FOLDER`.
The recipe is kiln train's default for resnets (docs/train.md): images as RGB, the training
split stored at R x R (R = size*256/224: shorter side to R, centre square), then
RandomResizedCrop(size) + RandomHorizontalFlip + Normalize(ImageNet) per epoch; the test
split Resize(R) + CenterCrop(size) + Normalize; SGD momentum 0.9, weight decay 1e-4,
lr 0.1*batch/256 with a cosine over the run's steps; CrossEntropyLoss(label_smoothing).
Prints both runs' per-epoch test accuracy and time, and the difference of the last ones.
"""
import argparse
import json
import math
import os
import subprocess
import tempfile
import time

import torch
import torchvision
from torchvision import transforms as T

ap = argparse.ArgumentParser()
ap.add_argument("--kiln", required=True)
ap.add_argument("--data", required=True)
ap.add_argument("--model", default="resnet18")
ap.add_argument("--epochs", type=int, default=5)
ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--image-size", type=int, default=28)
ap.add_argument("--label-smoothing", type=float, default=0.0)
ap.add_argument("--device", default="cuda")
ap.add_argument("--workers", type=int, default=8)
ap.add_argument("--seed", type=int, default=1)
args = ap.parse_args()
S = args.image_size
R = round(S * 256 / 224)

# kiln
out = os.path.join(os.environ.get("OUT", tempfile.gettempdir()), "train_vs_torch_kiln.json")
t0 = time.time()
subprocess.run([args.kiln, "train", args.model, "--data", args.data, "--image-size", str(S), "--epochs",
                str(args.epochs), "--batch", str(args.batch), "--label-smoothing", str(args.label_smoothing),
                "--device", args.device, "--seed", str(args.seed), "--json", out], check=True)
kiln_s = time.time() - t0
with open(out) as f:
    kiln_acc = [e["test_accuracy"] for e in json.load(f)["epochs"]]

# PyTorch
torch.manual_seed(args.seed)
dev = torch.device(args.device)
norm = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
rgb = T.Lambda(lambda im: im.convert("RGB"))
train_tf = T.Compose([rgb, T.Resize(R), T.CenterCrop(R), T.RandomResizedCrop(S), T.RandomHorizontalFlip(),
                      T.ToTensor(), norm])
test_tf = T.Compose([rgb, T.Resize(R), T.CenterCrop(S), T.ToTensor(), norm])
train = torchvision.datasets.ImageFolder(os.path.join(args.data, "train"), train_tf)
test_dir = os.path.join(args.data, "test")
if not os.path.isdir(test_dir):
    test_dir = os.path.join(args.data, "val")
test = torchvision.datasets.ImageFolder(test_dir, test_tf)
tl = torch.utils.data.DataLoader(train, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                                 pin_memory=True, persistent_workers=args.workers > 0)
vl = torch.utils.data.DataLoader(test, batch_size=512, num_workers=args.workers)
model = getattr(torchvision.models, args.model)(num_classes=len(train.classes)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1 * args.batch / 256, momentum=0.9, weight_decay=1e-4)
total = args.epochs * len(tl)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (1 + math.cos(math.pi * s / total)) / 2)
crit = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
torch_acc = []
t0 = time.time()
for epoch in range(args.epochs):
    model.train()
    for x, y in tl:
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        crit(model(x), y).backward()
        opt.step()
        sched.step()
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in vl:
            correct += (model(x.to(dev)).argmax(1).cpu() == y).sum().item()
    torch_acc.append(correct / len(test))
    print(f"torch epoch {epoch + 1}: test accuracy {torch_acc[-1]:.4f}")
torch_s = time.time() - t0

print(f"\n{'epoch':>5} {'kiln':>8} {'torch':>8}")
for e, (a, b) in enumerate(zip(kiln_acc, torch_acc)):
    print(f"{e + 1:>5} {a:8.4f} {b:8.4f}")
print(f"kiln {kiln_s:.0f} s, PyTorch {torch_s:.0f} s (whole runs, data loading included); "
      f"last accuracy difference {100 * (kiln_acc[-1] - torch_acc[-1]):+.2f} points")
