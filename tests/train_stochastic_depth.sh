#!/usr/bin/env bash
# ctest train_stochastic_depth: `kiln train` on DIR/tiny_sd.onnx (test_stochastic_depth wrote
# it: a small CNN whose residual block is under stochastic depth, RandomUniformLike + Less +
# Cast + Div + Mul as torch.onnx.export writes torchvision's) from the image folder
# test_anymodel wrote (DIR/folder, 3 colour classes):
#   - it trains: test accuracy >= 0.8 after 3 epochs;
#   - a run is reproducible from its seed: two runs with --seed 3 write the same losses,
#     --seed 4 others.
# train_stochastic_depth.sh KILN DIR
set -euo pipefail
kiln=$1 dir=$2
fail() { echo "FAIL: $*"; exit 1; }

out=$("$kiln" train "$dir/tiny_sd.onnx" --data "$dir/folder" --epochs 3 --batch 16 --lr 0.1 --seed 3 \
      --losses "$dir/sd_losses_a.txt")
echo "$out"
acc=$(sed -n 's/^test accuracy: //p' <<<"$out")
[ -n "$acc" ] || fail "no test accuracy printed"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.8) }' || fail "test accuracy $acc < 0.8"
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
echo "train_stochastic_depth: all passed"
