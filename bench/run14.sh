#!/usr/bin/env bash
# The final code: GPU kernel tests, ResNet-50 fp16 at batch 256 and 1, one training run.
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=.carry/gpu/kiln
O=${OUT:-/tmp}
[ -f .carry/gpu/test_cuda_ops.gz ] && gunzip -c .carry/gpu/test_cuda_ops.gz > /tmp/test_cuda_ops && chmod +x /tmp/test_cuda_ops
/tmp/test_cuda_ops > $O/test_cuda_ops.log 2>&1; grep -E "^FAIL" $O/test_cuda_ops.log | head -20; tail -1 $O/test_cuda_ops.log
python3 -c "import torch,torchvision; torch.onnx.export(torchvision.models.resnet50().eval(), (torch.randn(2,3,224,224),), '/tmp/r50.onnx', dynamo=False, input_names=['x'], output_names=['y'], dynamic_axes={'x':{0:'b'},'y':{0:'b'}}, opset_version=17)" 2>/dev/null
for b in 256 1; do echo "bs$b: $($K bench /tmp/r50.onnx --device cuda --batch $b --iters 50 --warmup 5 --fp16 2>&1 | grep -E '^latency|^GPU|^throughput' | cut -c1-80 | tr '\n' ' ')"; done
$K train mnist-net --data .carry/data --device cuda --epochs 2 --seed 1 --profile 2>&1 | grep -E '^epoch [0-9]+:|accuracy|whole step'
