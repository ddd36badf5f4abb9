#!/usr/bin/env bash
# ctest train_stochastic_depth: `kiln train` on DIR/tiny_sd.onnx (test_stochastic_depth wrote
# it: a small CNN whose residual block is under stochastic depth, RandomUniformLike + Less +
# Cast + Div + Mul as torch.onnx.export writes torchvision's) from the image folder
# test_anymodel wrote (DIR/folder, 3 colour classes):
#   - it trains: test accuracy >= 0.8 after 3 epochs;
#   - a run is reproducible from its seed: two runs with --seed 3 write the same losses,
#     --seed 4 others;
#   - DIR/tiny_sd_fixed.onnx (the batch fixed in a constant) refused, naming the node.
# With DEVICE cuda (ctest train_stochastic_depth_cuda, label gpu): the accuracy check alone,
# on the GPU (the random ops' kernels in a captured training step; cuDNN's gradients need
# not be bit-reproducible, so the loss comparisons are the CPU's).
# train_stochastic_depth.sh KILN DIR [DEVICE]
set -euo pipefail
kiln=$1 dir=$2 dev=${3:-cpu}
fail() { echo "FAIL: $*"; exit 1; }

losses=()
[ "$dev" = cpu ] && losses=(--losses "$dir/sd_losses_a.txt")  # --losses: CPU only
out=$("$kiln" train "$dir/tiny_sd.onnx" --data "$dir/folder" --epochs 3 --batch 16 --lr 0.1 --seed 3 \
      --device "$dev" "${losses[@]}")
echo "$out"
acc=$(sed -n 's/^test accuracy: //p' <<<"$out")
[ -n "$acc" ] || fail "no test accuracy printed"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.8) }' || fail "test accuracy $acc < 0.8"
if [ "$dev" != cpu ]; then
  echo "train_stochastic_depth ($dev): all passed"
  exit 0
fi
"$kiln" train "$dir/tiny_sd.onnx" --data "$dir/folder" --epochs 3 --batch 16 --lr 0.1 --seed 3 \
      --losses "$dir/sd_losses_b.txt" >/dev/null
"$kiln" train "$dir/tiny_sd.onnx" --data "$dir/folder" --epochs 1 --batch 16 --lr 0.1 --seed 4 --no-shuffle --no-augment \
      --losses "$dir/sd_losses_c.txt" >/dev/null
"$kiln" train "$dir/tiny_sd.onnx" --data "$dir/folder" --epochs 1 --batch 16 --lr 0.1 --seed 3 --no-shuffle --no-augment \
      --losses "$dir/sd_losses_d.txt" >/dev/null
n=$(wc -l < "$dir/sd_losses_b.txt")
[ "$n" -gt 2 ] || fail "fewer than 3 losses written"
cmp -s "$dir/sd_losses_a.txt" "$dir/sd_losses_b.txt" || fail "seed 3 twice: other losses"
# the same batches (no shuffle, no augmentation), seeds 3 and 4: only the draws differ
cmp -s "$dir/sd_losses_c.txt" "$dir/sd_losses_d.txt" && fail "seeds 3 and 4 gave the same losses"
# the batch fixed in the graph (the noise's shape a constant, as torch.onnx.export writes
# EfficientNet without dynamic_axes): refused, naming the node and the remedy
if err=$("$kiln" train "$dir/tiny_sd_fixed.onnx" --data "$dir/folder" --batch 4 --max-steps 1 2>&1); then
  fail "a graph with the batch fixed in a constant accepted"
fi
grep -q "shapes are first lost at Mul node 'sd/mul'" <<<"$err" || fail "fixed batch message: $err"
grep -q "dynamic_axes" <<<"$err" || fail "fixed batch message names no remedy: $err"
echo "train_stochastic_depth: all passed"
