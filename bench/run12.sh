#!/usr/bin/env bash
# The side-by-side table (issue 3): both exporters, fp32 and fp16 agreement, kiln vs
# PyTorch eager and torch.compile (fp16, channels_last) at batch 1 and the large batch.
#   bench/run12.sh resnet50,resnet18      (one call per pair of models: ~5 min each)
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
M=${1:-resnet50,resnet18}
PYTHONUNBUFFERED=1 python3 bench/side_by_side.py --kiln .carry/gpu/kiln --models $M --dynamo --fp16 --compile $M \
  --init-bn-stats mobilenet_v2 2>&1 | grep -v -i warn | grep -v "torch.onnx.export\|^\s*$\|W1121\|Applied\|dynamo_export"
