#!/usr/bin/env bash
# Residual fused under a symbolic batch + 1x1 convolutions as cuBLASLt products: GPU kernel
# tests, ResNet-50 fp16 at batch 256 and 1 with and without conv-gemm, top of the profiles.
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=.carry/gpu/kiln
O=${OUT:-/tmp}
.carry/gpu/test_cuda_ops > $O/test_cuda_ops.log 2>&1; grep -E "^FAIL|^note" $O/test_cuda_ops.log | head -20; tail -1 $O/test_cuda_ops.log
python3 -c "import torch,torchvision; torch.onnx.export(torchvision.models.resnet50().eval(), (torch.randn(2,3,224,224),), '/tmp/r50.onnx', dynamo=False, input_names=['x'], output_names=['y'], dynamic_axes={'x':{0:'b'},'y':{0:'b'}}, opset_version=17)" 2>/dev/null
for b in 256 1; do
  for dis in "" conv-gemm; do
    echo "== resnet50 fp16 bs$b disable=${dis:--}"
    $K bench /tmp/r50.onnx --device cuda --batch $b --iters 20 --warmup 3 --fp16 ${dis:+--disable $dis} --profile > $O/r50-b$b-${dis:-all}.log 2>&1
    grep -E '^throughput|^GPU compute|kiln:' $O/r50-b$b-${dis:-all}.log
  done
  head -40 $O/r50-b$b-all.log | tail -32 | cut -c1-170
done
