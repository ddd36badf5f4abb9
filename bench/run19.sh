#!/usr/bin/env bash
# Runs 19-21 (v1.7) and later: GPU kernel tests, epochs and step profiles with each
# technique on and off, AMP, PyTorch's reference script in the same call, and ResNet-50
# inference (no regression).
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=/tmp/kiln
D=.carry/data
O=${OUT:-/tmp}
gunzip -c .carry/gpu/kiln.gz > $K && chmod +x $K
gunzip -c .carry/gpu/test_cuda_ops.gz > /tmp/test_cuda_ops && chmod +x /tmp/test_cuda_ops
/tmp/test_cuda_ops > $O/test_cuda_ops.log 2>&1; grep -E "^FAIL" $O/test_cuda_ops.log | head -20; tail -1 $O/test_cuda_ops.log
grep -E "train streams|side streams|train vs cpu|matches the CPU" $O/test_cuda_ops.log | head
run() {
  f=$O/train$(echo "$*" | tr -d ' -').log
  echo "== kiln train mnist-net --device cuda --epochs 2 --seed 1 --profile $*"
  $K train mnist-net --data $D --device cuda --epochs 2 --seed 1 --profile "$@" > $f 2>&1
  grep -E '^epoch [0-9]+:|accuracy|skipped|whole step|sum of all' $f
  sed -n '/per-node profile/,$p' $f | sed -n 5,12p | cut -c1-150
}
run
run --amp fp16
run --amp bf16
# each technique off in turn (ABLATE="fuse-pool streams", say; QUICK=1 runs none)
if [ -z "${QUICK:-}" ]; then
  for a in ${ABLATE:-streams fuse-loss}; do run --amp fp16 --disable $a; done
fi
echo "== PyTorch reference (same call)"
PYTHONUNBUFFERED=1 python3 bench/reference/torch_train.py $D 2>&1 | grep -v Warning | grep mnist
python3 -c "import torch,torchvision; torch.onnx.export(torchvision.models.resnet50().eval(), (torch.randn(2,3,224,224),), '/tmp/r50.onnx', dynamo=False, input_names=['x'], output_names=['y'], dynamic_axes={'x':{0:'b'},'y':{0:'b'}}, opset_version=17)" 2>/dev/null
[ -z "${QUICK:-}" ] && for b in 256 1; do echo "resnet50 fp16 bs$b: $($K bench /tmp/r50.onnx --device cuda --batch $b --iters 50 --warmup 5 --fp16 2>&1 | grep -E '^latency|^GPU|^throughput' | cut -c1-80 | tr '\n' ' ')"; done
