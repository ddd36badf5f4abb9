#!/usr/bin/env bash
# ctest train_onnx_folder: `kiln train` on what test_anymodel wrote into DIR:
#   - DIR/tiny_cnn.onnx (a small CNN saved as ONNX) from the image folder DIR/folder (3
#     colour classes, PNGs of varying sizes): test accuracy >= 0.9 after 4 epochs, and its
#     --export loads back (`kiln info`: input image, output logits);
#   - resnet18 from the tiny CIFAR-10 in DIR/cifar (two steps, torchvision's parameter count);
#   - a class count below the data set's, a model without weights and a bad --label-smoothing,
#     refused with a message.
# train_anymodel.sh KILN DIR
set -euo pipefail
kiln=$1 dir=$2
fail() { echo "FAIL: $*"; exit 1; }

out=$("$kiln" train "$dir/tiny_cnn.onnx" --data "$dir/folder" --epochs 4 --batch 16 --lr 0.1 --seed 3 \
      --label-smoothing 0.05 --export "$dir/tiny_trained.onnx")
echo "$out"
acc=$(sed -n 's/^test accuracy: //p' <<<"$out")
[ -n "$acc" ] || fail "no test accuracy printed"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' || fail "test accuracy $acc < 0.9"
grep -q "image folders: 120 training and 30 test images of 3 classes" <<<"$out" || fail "image folder sizes"
info=$("$kiln" info "$dir/tiny_trained.onnx")
echo "$info"
grep -Eq "^  image +f32\[.*,3,16,16\]" <<<"$info" || fail "exported input"
grep -Eq "^  logits +f32\[.*,3\]" <<<"$info" || fail "exported output"
grep -q "BatchNormalization" <<<"$info" || fail "exported BatchNormalization"

out=$("$kiln" train resnet18 --data "$dir/cifar" --image-size 32 --batch 10 --max-steps 2)
echo "$out"
grep -q "CIFAR-10: 30 training and 9 test images of 32x32, 10 classes" <<<"$out" || fail "CIFAR-10 read"
grep -q "resnet18: 11181642 parameters" <<<"$out" || fail "resnet18 parameter count"
grep -q "^test accuracy: " <<<"$out" || fail "resnet18 evaluated"

if err=$("$kiln" train resnet18 --data "$dir/folder" --classes 2 --image-size 16 --max-steps 1 2>&1); then
  fail "--classes 2 for 3 classes accepted"
fi
grep -q "has 3 classes (labels up to 2) but the model has 2 outputs" <<<"$err" || fail "class count message: $err"
if err=$("$kiln" train "$dir/no_weights.onnx" --data "$dir/folder" --max-steps 1 2>&1); then
  fail "a model without weights accepted"
fi
grep -q "no_weights.onnx: the model has no float initializer that reaches the loss" <<<"$err" || fail "no weights: $err"
set +e
"$kiln" train "$dir/tiny_cnn.onnx" --data "$dir/folder" --label-smoothing 1.5 2>/dev/null
[ $? -eq 2 ] || fail "--label-smoothing 1.5 accepted"
echo "train_anymodel: all passed"
