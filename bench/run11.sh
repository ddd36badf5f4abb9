#!/usr/bin/env bash
# GPU kernel tests (incl. the training profile's restore), the stem-padding experiment
# (KILN_PAD_SMALL=none|4|8), the training step profile, kiln's epoch next to PyTorch's
# reference script, and the loss comparison with PyTorch's own spread.
# KILN_PAD_SMALL was a temporary switch of the pad-channels pass, built for this one
# experiment and never committed (f4d6fc0 made its answer, 4 channels, the rule), so the
# three stem runs now measure the same thing. Results: bench/NOTES.md, results/run11/.
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=.carry/gpu/kiln
D=.carry/data
O=${OUT:-/tmp}
[ -f .carry/gpu/test_cuda_ops.gz ] && gunzip -c .carry/gpu/test_cuda_ops.gz > /tmp/test_cuda_ops && chmod +x /tmp/test_cuda_ops
/tmp/test_cuda_ops > $O/test_cuda_ops.log 2>&1; grep -E "^FAIL" $O/test_cuda_ops.log | head -20; tail -1 $O/test_cuda_ops.log
python3 -c "import torch,torchvision; torch.onnx.export(torchvision.models.resnet50().eval(), (torch.randn(2,3,224,224),), '/tmp/r50.onnx', dynamo=False, input_names=['x'], output_names=['y'], dynamic_axes={'x':{0:'b'},'y':{0:'b'}}, opset_version=17)" 2>/dev/null
for ps in 8 4 none; do
  for b in 256 1; do
    KILN_PAD_SMALL=$ps $K bench /tmp/r50.onnx --device cuda --batch $b --iters 30 --warmup 3 --fp16 --profile > $O/pad-$ps-b$b.log 2>&1
    echo "pad $ps bs$b: $(grep -E '^throughput' $O/pad-$ps-b$b.log) $(grep -E '^GPU compute' $O/pad-$ps-b$b.log | cut -c1-70)"
    grep -E '/conv1/Conv|ToNHWC|MaxPool' $O/pad-$ps-b$b.log | cut -c1-150
  done
done
echo "== kiln train --device cuda --profile"
$K train mnist-net --data $D --device cuda --epochs 2 --seed 1 --profile > $O/train-profile.log 2>&1
grep -E '^epoch|accuracy' $O/train-profile.log; sed -n '/profile/,$p' $O/train-profile.log | head -60 | cut -c1-170
echo "== PyTorch reference"
PYTHONUNBUFFERED=1 python3 bench/reference/torch_train.py $D 2>&1 | grep -v Warning | tail -6
echo "== loss vs torch"
( time python3 bench/loss_vs_torch.py --kiln $K --data $D ) > $O/loss-vs-torch.log 2>&1; tail -30 $O/loss-vs-torch.log
