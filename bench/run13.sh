#!/usr/bin/env bash
# Training after the step-kernel work: GPU kernel tests, the step profile, epochs on CUDA
# (off and fp16 AMP), PyTorch's reference script in the same call.
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=.carry/gpu/kiln
D=.carry/data
O=${OUT:-/tmp}
[ -f .carry/gpu/test_cuda_ops.gz ] && gunzip -c .carry/gpu/test_cuda_ops.gz > /tmp/test_cuda_ops && chmod +x /tmp/test_cuda_ops
/tmp/test_cuda_ops > $O/test_cuda_ops.log 2>&1; grep -E "^FAIL" $O/test_cuda_ops.log | head -20; tail -1 $O/test_cuda_ops.log
echo "== kiln train --device cuda --epochs 3 --profile"
$K train mnist-net --data $D --device cuda --epochs 3 --seed 1 --profile > $O/train-profile.log 2>&1
grep -E '^epoch [0-9]+:|accuracy' $O/train-profile.log; sed -n '/per-node profile/,$p' $O/train-profile.log | head -30 | cut -c1-150
for amp in fp16 bf16; do
  echo "== --amp $amp, 2 epochs"
  $K train mnist-net --data $D --device cuda --epochs 2 --seed 1 --amp $amp 2>&1 | grep -E '^epoch [0-9]+:|accuracy|skipped'
done
echo "== PyTorch reference"
PYTHONUNBUFFERED=1 python3 bench/reference/torch_train.py $D 2>&1 | grep -v Warning | grep mnist
