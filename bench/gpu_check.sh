#!/usr/bin/env bash
# One call on the GPU machine: GPU kernel tests, the demo model on CUDA, and kiln next to
# PyTorch on torchvision models. Build and pack here first:
#   cmake -S . -B build-cuda && cmake --build build-cuda -j2 && tests/gpu/device.sh pack build-cuda
# then run `bench/gpu_check.sh [side_by_side args]` there with .carry carried.
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=.carry/gpu/kiln
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
rc=0
echo "== GPU kernel tests"
[ -x .carry/gpu/test_cuda_context ] && { .carry/gpu/test_cuda_context || rc=1; }
.carry/gpu/test_cuda_ops > "${OUT:-/tmp}/test_cuda_ops.log" 2>&1 || rc=1
grep -E "^FAIL" "${OUT:-/tmp}/test_cuda_ops.log" | head -40
tail -3 "${OUT:-/tmp}/test_cuda_ops.log"
echo "== tiny CNN on CUDA vs ONNX's reference evaluator"
$K run examples/tiny_cnn.onnx --input examples/tiny_cnn_x.npy --output /tmp/tiny_y.npy --device cuda --stats \
  && $K compare /tmp/tiny_y.npy examples/tiny_cnn_expected.npy --rtol 1e-4 --atol 1e-6 || rc=1
if [ -x .carry/gpu/gelu_fusion ]; then
  echo "== gelu as five ops, fused by NVRTC codegen, vs the copy floor"
  .carry/gpu/gelu_fusion 2>&1 | tail -8
fi
echo "== side by side"
PYTHONUNBUFFERED=1 python3 bench/side_by_side.py --kiln "$K" "$@" || rc=1
exit $rc
