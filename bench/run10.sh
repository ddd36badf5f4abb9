#!/usr/bin/env bash
# After the stem conversion, the NHWC pool and the fused-call timing: GPU kernel tests,
# ResNet-50 fp16 at batch 256 and 1 (profiles), one-time cost with a cold and a warm
# algorithm cache, and the ablation at batch 256.
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=.carry/gpu/kiln
O=${OUT:-/tmp}
.carry/gpu/test_cuda_ops > $O/test_cuda_ops.log 2>&1; grep -E "^FAIL|^note" $O/test_cuda_ops.log | head -20; tail -1 $O/test_cuda_ops.log
python3 -c "import torch,torchvision; torch.onnx.export(torchvision.models.resnet50().eval(), (torch.randn(2,3,224,224),), '/tmp/r50.onnx', dynamo=False, input_names=['x'], output_names=['y'], dynamic_axes={'x':{0:'b'},'y':{0:'b'}}, opset_version=17)" 2>/dev/null
export KILN_CACHE_DIR=$O/cache
for b in 256 1; do
  for run in cold warm; do
    echo "== resnet50 fp16 bs$b ($run algorithm cache)"
    $K bench /tmp/r50.onnx --device cuda --batch $b --iters 50 --warmup 5 --fp16 --profile > $O/r50-b$b-$run.log 2>&1
    grep -E '^one-time|^latency|^throughput|^GPU compute|kiln:' $O/r50-b$b-$run.log
  done
  sed -n '/per-layer/,$p' $O/r50-b$b-warm.log | head -24 | cut -c1-170
done
echo "== ablation, bs 256"
$K bench /tmp/r50.onnx --device cuda --batch 256 --iters 20 --warmup 3 --fp16 --ablate 2>&1 | tail -16
