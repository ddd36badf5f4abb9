"""kiln train resnet18 on a tiny generated CIFAR-10 (binary batches written here), then:
  - the checkpoint (--save) as a PyTorch state_dict: its "param/NAME" and "bn/NAME" tensors
    under their names (num_batches_tracked, which kiln does not keep, added as the steps
    taken) load into torchvision's resnet18(num_classes=10) with strict=True;
  - that PyTorch model in eval mode and onnxruntime on the --export file give the same
    logits (within 1e-4 of their scale).

    test_resnet_state_dict.py KILN WORKDIR
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import torch
import torchvision

kiln, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
data = os.path.join(work, "cifar")
os.makedirs(data, exist_ok=True)
rng = np.random.default_rng(0)


def batch_file(path, n):
    labels = rng.integers(0, 10, n).astype(np.uint8)
    pixels = rng.integers(0, 256, (n, 3072)).astype(np.uint8)
    with open(path, "wb") as f:
        f.write(np.concatenate([labels[:, None], pixels], axis=1).tobytes())


batch_file(os.path.join(data, "data_batch_1.bin"), 40)
batch_file(os.path.join(data, "test_batch.bin"), 20)
ck, onnx_path = os.path.join(work, "ck.safetensors"), os.path.join(work, "r18.onnx")
subprocess.run([kiln, "train", "resnet18", "--data", data, "--image-size", "32", "--batch", "8", "--max-steps", "3", "--lr", "0.01",
                "--label-smoothing", "0.1", "--save", ck, "--export", onnx_path], check=True)


def read_safetensors(path):
    """The file parsed by hand (the format: 8-byte header length, JSON header, data)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        blob = f.read()
    kinds = {"F32": np.float32, "I64": np.int64, "F64": np.float64, "I32": np.int32, "U8": np.uint8}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(blob[a:b], dtype=kinds[info["dtype"]]).reshape(info["shape"]).copy()
    return out, header.get("__metadata__", {})


tensors, meta = read_safetensors(ck)
state = {}
for name, a in tensors.items():
    kind, _, key = name.partition("/")
    if kind in ("param", "bn"):
        state[key] = torch.from_numpy(a)
steps = int(meta.get("steps", 3)) if isinstance(meta, dict) else 3
model = torchvision.models.resnet18(num_classes=10)
for key in list(model.state_dict()):
    if key.endswith("num_batches_tracked"):
        state[key] = torch.tensor(steps)
missing = set(model.state_dict()) - set(state)
extra = set(state) - set(model.state_dict())
print(f"checkpoint: {len(state)} tensors; missing {sorted(missing)[:5]}, unexpected {sorted(extra)[:5]}")
model.load_state_dict(state, strict=True)
model.eval()
x = rng.standard_normal((5, 3, 32, 32)).astype(np.float32)
with torch.no_grad():
    ref = model(torch.from_numpy(x)).numpy()
sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
err = float(np.abs(got - ref).max())
scale = float(np.abs(ref).max())
print(f"PyTorch (state_dict from kiln's checkpoint) vs onnxruntime (kiln's export): max |diff| {err:.3e}, "
      f"max |logit| {scale:.3e}")
sys.exit(0 if err <= 1e-4 * max(1.0, scale) else 1)
