#!/usr/bin/env bash
# One GPU call: fp16 pass-by-pass diagnosis of a model, ResNet-50 fp32 timing without the
# layout pass, and mnist-net training with --amp fp16 / bf16 next to fp32.
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=.carry/gpu/kiln
D=.carry/data
PYTHONUNBUFFERED=1 python3 bench/diag_fp16.py --kiln $K --model mobilenet_v2 2>&1 | grep -v Warn | grep -v torch.onnx.export
for amp in fp16 bf16 off; do
  echo "== kiln train mnist-net --device cuda --amp $amp --epochs 2"
  $K train mnist-net --data $D --device cuda --amp $amp --epochs 2 --seed 1 2>&1 | grep -E "^epoch [0-9]+:|accuracy:|kiln:"
done
