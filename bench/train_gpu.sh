#!/usr/bin/env bash
# One call on the GPU machine for training: the GPU kernel tests, kiln's mnist-net epoch on
# CUDA (twice: the first pays cuDNN's algorithm search), and PyTorch's reference script on
# the same data. Here first: build-cuda, `tests/gpu/device.sh pack build-cuda`, and the
# four Fashion-MNIST .gz files copied to .carry/data; carry .carry.
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=.carry/gpu/kiln
D=.carry/data
O=${OUT:-/tmp}
rc=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ -x .carry/gpu/test_cuda_ops ]; then
  echo "== GPU kernel tests"
  .carry/gpu/test_cuda_ops > "$O/test_cuda_ops.log" 2>&1 || rc=1
  grep -E "^FAIL" "$O/test_cuda_ops.log" | head -30
  tail -1 "$O/test_cuda_ops.log"
fi
for i in 1 2; do
  echo "== kiln train mnist-net --device cuda (run $i; TF32 convolutions as PyTorch's default)"
  /usr/bin/time -f "wall %e s" $K train mnist-net --data $D --device cuda --epochs 1 --seed $i 2>&1 | tail -3 || rc=1
done
echo "== kiln train mnist-net --device cuda --strict-fp32"
$K train mnist-net --data $D --device cuda --epochs 1 --seed 1 --strict-fp32 2>&1 | tail -2 || rc=1
echo "== kiln train mnist-net --device cuda --epochs 3"
$K train mnist-net --data $D --device cuda --epochs 3 --seed 1 2>&1 | grep -E "^epoch [0-9]+:|accuracy:" || rc=1
echo "== kiln train mnist-net --device cpu, 16 cores (for reference)"
/usr/bin/time -f "wall %e s" $K train mnist-net --data $D --device cpu --epochs 1 --seed 1 2>&1 | tail -3
echo "== PyTorch reference (bench/reference/torch_train.py, a copy of ../shared/bench-reference)"
PYTHONUNBUFFERED=1 python3 bench/reference/torch_train.py $D 2>&1 | grep -v Warning | tail -8
exit $rc
