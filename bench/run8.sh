#!/usr/bin/env bash
# Fresh per-layer profiles of the current code (ResNet-50 fp16 at batch 256 and 1) before
# the stem / 1x1-convolution work; what profilers the machine has.
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=.carry/gpu/kiln
which nsys ncu 2>&1 | head -2
python3 -c "import torch,torchvision; torch.onnx.export(torchvision.models.resnet50().eval(), (torch.randn(2,3,224,224),), '/tmp/r50.onnx', dynamo=False, input_names=['x'], output_names=['y'], dynamic_axes={'x':{0:'b'},'y':{0:'b'}}, opset_version=17)" 2>/dev/null
for b in 256 1; do
  $K bench /tmp/r50.onnx --device cuda --batch $b --iters 20 --warmup 3 --fp16 --profile 2>&1 | head -${ROWS:-200}
done
