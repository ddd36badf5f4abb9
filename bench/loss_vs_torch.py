"""kiln's fp32 loss against PyTorch's over the first 100 steps of mnist-net, from the same
initial weights, dropout off, the same batches (no shuffling: samples 0..6399 in order),
Adadelta lr 1.0, batch 64, both on the CPU in fp32. The goal: every step's loss within 2%.

    python3 bench/loss_vs_torch.py --kiln build/kiln --data DIR   (DIR: Fashion-MNIST's .gz files)
"""
import argparse, gzip, os, subprocess, tempfile
import numpy as np
import torch, torch.nn as nn, torch.nn.functional as F
from safetensors.torch import save_file

ap = argparse.ArgumentParser()
ap.add_argument("--kiln", required=True)
ap.add_argument("--data", required=True)
ap.add_argument("--steps", type=int, default=100)
a = ap.parse_args()


class Net(nn.Module):  # pytorch/examples mnist/main.py, dropout left out (off in both)
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


def idx(path):
    with gzip.open(path) as f:
        raw = f.read()
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)


torch.manual_seed(1)
torch.set_num_threads(8)
net = Net()
tmp = tempfile.mkdtemp()
w = os.path.join(tmp, "init.safetensors")
save_file({k: v.contiguous() for k, v in net.state_dict().items()}, w)

X = torch.from_numpy(((idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")) / 255.0 - 0.2860) / 0.3530)
                     .astype(np.float32)).unsqueeze(1)
Y = torch.from_numpy(idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).astype(np.int64))
opt = torch.optim.Adadelta(net.parameters(), lr=1.0)
ref = []
for s in range(a.steps):
    xb, yb = X[s * 64:(s + 1) * 64], Y[s * 64:(s + 1) * 64]
    opt.zero_grad(set_to_none=True)
    loss = F.nll_loss(net(xb), yb)
    loss.backward()
    opt.step()
    ref.append(loss.item())

lf = os.path.join(tmp, "losses.txt")
r = subprocess.run([a.kiln, "train", "mnist-net", "--data", a.data, "--device", "cpu", "--no-dropout", "--no-shuffle",
                    "--init", w, "--losses", lf, "--max-steps", str(a.steps), "--batch", "64"], capture_output=True, text=True)
if r.returncode:
    raise SystemExit("kiln failed: " + r.stderr[-500:])
got = [float(v) for v in open(lf).read().split()]
rel = [abs(g - t) / abs(t) for g, t in zip(got, ref)]
worst = int(np.argmax(rel))
for s in (0, 1, 9, 49, a.steps - 1):
    print(f"step {s + 1:4d}: torch {ref[s]:.6f}  kiln {got[s]:.6f}  rel diff {rel[s]:.2e}")
print(f"{len(got)} steps compared; worst step {worst + 1}: rel diff {rel[worst]:.3e} "
      f"({'within' if rel[worst] <= 0.02 else 'OUTSIDE'} the 2% goal)")
raise SystemExit(0 if len(got) == a.steps and rel[worst] <= 0.02 else 1)
