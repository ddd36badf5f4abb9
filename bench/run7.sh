#!/usr/bin/env bash
# After the same-shape NHWC change: GPU kernel tests, ResNet-50 fp16 default vs elementwise
# fusion off, agreement with PyTorch, and torch.compile fp16 in the same call.
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=.carry/gpu/kiln
.carry/gpu/test_cuda_ops > ${OUT:-/tmp}/test_cuda_ops.log 2>&1; grep -E "^FAIL" ${OUT:-/tmp}/test_cuda_ops.log | head; tail -1 ${OUT:-/tmp}/test_cuda_ops.log
PYTHONUNBUFFERED=1 python3 bench/side_by_side.py --kiln $K --models resnet50 --fp16 --compile resnet50 2>&1 \
  | grep -v -i warn | grep -v "torch.onnx.export" | tail -5
python3 -c "import torch,torchvision; torch.onnx.export(torchvision.models.resnet50().eval(), (torch.randn(2,3,224,224),), '/tmp/r50.onnx', dynamo=False, input_names=['x'], output_names=['y'], dynamic_axes={'x':{0:'b'},'y':{0:'b'}}, opset_version=17)" 2>/dev/null
for dis in "" fuse-eltwise pad-channels; do
  echo "resnet50 fp16 bs256 disable=${dis:--}: $($K bench /tmp/r50.onnx --device cuda --batch 256 --iters 20 --warmup 3 --fp16 ${dis:+--disable $dis} 2>&1 | grep -E '^throughput|kiln:')"
done
