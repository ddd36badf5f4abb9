#!/usr/bin/env bash
# One GPU call: export mobilenet_v2 (with an input and PyTorch's output) for debugging
# here; ResNet-50 timings fp32 and fp16 with each technique switched off; gelu fusion.
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=.carry/gpu/kiln
O=${OUT:-/tmp}
PYTHONUNBUFFERED=1 python3 - <<'PY' 2>&1 | grep -v Warn | grep -v "torch.onnx.export"
import os, numpy as np, torch, torchvision
O = os.environ.get("OUT", "/tmp")
torch.manual_seed(0)
for name in ("mobilenet_v2", "resnet50"):
    m = getattr(torchvision.models, name)().eval()
    torch.onnx.export(m, (torch.randn(2, 3, 224, 224),), f"/tmp/{name}.onnx", dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}}, opset_version=17)
    if name == "mobilenet_v2":
        os.system(f"cp /tmp/{name}.onnx {O}/")
        x = np.random.default_rng(3).standard_normal((2, 3, 224, 224)).astype(np.float32)
        np.save(f"{O}/mb_x.npy", x)
        with torch.inference_mode():
            np.save(f"{O}/mb_y.npy", m(torch.from_numpy(x)).numpy())
print("exported")
PY
for prec in --fp32 --fp16; do
  for dis in "" nhwc fuse-conv fuse-eltwise fold-bn cuda-graph autotune pad-channels all; do
    r=$($K bench /tmp/resnet50.onnx --device cuda --batch 256 --iters 20 --warmup 3 $prec ${dis:+--disable $dis} 2>&1 | grep -E "^throughput|kiln:")
    echo "resnet50 bs256 $prec disable=${dis:--}: $r"
  done
  r=$($K bench /tmp/resnet50.onnx --device cuda --batch 1 --iters 100 --warmup 10 $prec 2>&1 | grep -E "GPU compute|kiln:")
  echo "resnet50 bs1 $prec: $r"
done
$K bench /tmp/resnet50.onnx --device cuda --batch 256 --iters 10 --fp16 --profile --trace $O/resnet50_fp16_trace.json 2>&1 | head -40
[ -x .carry/gpu/gelu_fusion ] && .carry/gpu/gelu_fusion 2>&1 | tail -30
