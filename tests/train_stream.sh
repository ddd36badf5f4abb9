#!/usr/bin/env bash
# ctest train_stream_folder: `kiln train --data-cache off` (streaming image folders) on the
# CPU, with the small CNN test_anymodel wrote into DIR (DIR/tiny_cnn.onnx, 16x16 RGB in):
#   - from a generated ImageNet-like folder (make_jpeg_folder: JPEG and PNG, grey and RGBA
#     among them, sizes around 64x48): streamed, the data wait and decode rate printed each
#     epoch and in --json, test accuracy >= 0.8 after 3 epochs (chance: 0.33; the grey tenth
#     of the images keeps only the stripes' direction, not the class colour);
#   - the same folder with one training JPEG cut short: the run fails naming the file, and the
#     checkpoint an earlier run saved is unchanged and still resumes;
#   - --data-cache takes auto|on|off only; off on a data set that is not an image folder is
#     refused; --decode takes auto|gpu|cpu, and gpu only with --device cuda.
# DEVICE cuda (ctest train_stream_cuda, label gpu): the same on the GPU, the ring in pinned
# memory, and 3 epochs with --decode gpu (nvJPEG, or the line saying it is missing).
# train_stream.sh KILN MAKE_JPEG_FOLDER DIR [DEVICE]
set -euo pipefail
kiln=$1 make=$2 dir=$3 device=${4:-cpu}
fail() { echo "FAIL: $*"; exit 1; }
data=$dir/stream_jpeg_$device
dir_bad=$dir/stream_bad_$device
ckpt=$dir/stream_$device.ckpt
rm -rf "$data" "$dir_bad"
"$make" "$data" 3 60 20 64x48 2 7

out=$("$kiln" train "$dir/tiny_cnn.onnx" --device "$device" --data "$data" --data-cache off --data-workers 2 --epochs 3 --batch 16 \
      --lr 0.05 --seed 3 --json "$dir/stream_$device.json" --save "$ckpt")
echo "$out"
grep -q "image folders: 180 training and 60 test images of 3 classes, streamed" <<<"$out" || fail "streamed folder"
mem=host
[ "$device" = cuda ] && mem=pinned
# on CUDA the default (--decode auto) decodes on the GPU where nvJPEG loads: the threads read files
grep -Eq "streaming: 2 (decoding|file reading) threads, 4 batches in the ring \($mem memory\)" <<<"$out" ||
  fail "decoding threads"
[ "$(grep -c '^data: waited [0-9.]* s of [0-9.]* s (.*%); decoded [0-9]* images at [0-9]* img/s (2 threads)' \
     <<<"$out")" -eq 3 ] ||
  fail "a data line per epoch"
acc=$(sed -n 's/^test accuracy: //p' <<<"$out")
[ -n "$acc" ] || fail "no test accuracy printed"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.8) }' || fail "test accuracy $acc < 0.8"
python3 - "$dir/stream_$device.json" <<'PY' || fail "--json data_wait_s / data_img_s"
import json, sys
e = json.load(open(sys.argv[1]))["epochs"]
assert len(e) == 3 and all(x["data_wait_s"] >= 0 and x["data_img_s"] > 0 for x in e), e
PY

# a damaged JPEG: the run stops naming it; the checkpoint saved before is untouched
cp -r "$data" "$dir_bad"
# the first JPEG by glob, not `ls | head -1`: under pipefail, ls killed by SIGPIPE once head has
# its line (output over one pipe buffer, as with a long build path) ends the script silently
jpgs=("$dir/stream_bad_$device/train/c0001/"*.jpg)
victim=${jpgs[0]}
[ -f "$victim" ] || fail "no JPEG in $dir/stream_bad_$device/train/c0001"
head -c 600 "$victim" > "$victim.cut" && mv "$victim.cut" "$victim"
sum=$(md5sum < "$ckpt")
if err=$("$kiln" train "$dir/tiny_cnn.onnx" --device "$device" --data "$dir_bad" --data-cache off --epochs 4 --batch 16 \
         --lr 0.05 --seed 3 --resume "$ckpt" --save "$ckpt" 2>&1); then
  fail "a truncated JPEG accepted"
fi
echo "$err"
grep -q "stream_bad_$device/train/c0001/.*\.jpg" <<<"$err" || fail "the damaged file not named: $err"
[ "$(md5sum < "$ckpt")" = "$sum" ] || fail "the checkpoint changed"
out=$("$kiln" train "$dir/tiny_cnn.onnx" --device "$device" --data "$data" --data-cache off --epochs 4 --batch 16 --lr 0.05 --seed 3 \
      --resume "$ckpt" --max-steps 2)
grep -q "resumed from .* at epoch 4 step 0" <<<"$out" || fail "the checkpoint no longer resumes: $out"

# --decode gpu (issue 12, nvJPEG): on CUDA either nvJPEG decodes (a decode line per epoch, every
# image of the folder's RGB JPEGs on the GPU, the grey JPEGs and PNGs on the CPU, the accuracy
# as good) or, where it cannot be loaded, one line says so and the CPU decodes
if [ "$device" = cuda ]; then
  out=$("$kiln" train "$dir/tiny_cnn.onnx" --device cuda --data "$data" --data-cache off --data-workers 2 --epochs 3 \
        --batch 16 --lr 0.05 --seed 3 --decode gpu)
  echo "$out"
  if grep -q "^nvJPEG not found (.*): decoding JPEGs on the CPU" <<<"$out"; then
    echo "train_stream: nvJPEG not found here: the CPU decoded (the line above says so)"
  else
    grep -q "JPEGs decoded on the GPU by nvJPEG [a-zA-Z ]*" <<<"$out" || fail "--decode gpu: no GPU decoding and no reason"
    [ "$(grep -c '^decode: nvJPEG [a-zA-Z ]* on the GPU: [1-9][0-9]* images, [0-9]* on the CPU instead' <<<"$out")" -eq 3 ] ||
      fail "--decode gpu: a decode line per epoch"
    acc=$(sed -n 's/^test accuracy: //p' <<<"$out")
    awk -v a="$acc" 'BEGIN { exit !(a >= 0.8) }' || fail "--decode gpu: test accuracy $acc < 0.8"
  fi
fi

set +e
"$kiln" train "$dir/tiny_cnn.onnx" --device "$device" --data "$data" --decode maybe 2>/dev/null
[ $? -eq 2 ] || fail "--decode maybe accepted"
[ "$device" = cpu ] && {
  "$kiln" train "$dir/tiny_cnn.onnx" --device cpu --data "$data" --data-cache off --decode gpu 2>/dev/null
  [ $? -eq 2 ] || fail "--decode gpu on the CPU accepted"
}
"$kiln" train "$dir/tiny_cnn.onnx" --device "$device" --data "$data" --data-cache maybe 2>/dev/null
[ $? -eq 2 ] || fail "--data-cache maybe accepted"
"$kiln" train "$dir/tiny_cnn.onnx" --device "$device" --data "$dir/cifar" --data-cache off 2>/dev/null
[ $? -eq 2 ] || fail "--data-cache off on CIFAR-10 accepted"
echo "train_stream: all passed"
