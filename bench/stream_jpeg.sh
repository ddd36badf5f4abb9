#!/usr/bin/env bash
# stream_jpeg.sh — issue 12's streaming pipeline on the GPU machine, one call: decode
# throughput CPU vs GPU (nvJPEG), then ResNet-50 AMP batch 256 trained from the folder of
# generated ~500x375 JPEGs streamed with --decode cpu and --decode gpu, and with the data set
# resident on the GPU (--data-cache on) for the reference rate. Epoch 2's line is the number.
#
#   bench/stream_jpeg.sh [BUILD] [DIR]      (build-cuda, /tmp/jpg)
#
# nvJPEG: KILN_NVJPEG_LIB=<unpacked nvidia-nvjpeg wheel>/nvidia/cu13/lib (or pip's). Set
# KILN_NVJPEG_LOG=1 for the per-batch timings of the GPU decoder (stderr).
set -uo pipefail
build=${1:-build-cuda} dir=${2:-/tmp/jpg}
[ -d "$dir/train" ] || "$build/tests/make_jpeg_folder" "$dir" 40 256 2 500x375 16
echo "== decode throughput (test_nvjpeg --bench: one epoch each after a warm one, batch 256, 16 workers)"
"$build/tests/test_nvjpeg" "$dir" --bench 256 16
common=(train resnet50 --data "$dir" --device cuda --amp fp16 --batch 256 --epochs 2 --classes 40)
for mode in gpu cpu; do
  echo "== streaming, --decode $mode"
  "$build/kiln" "${common[@]}" --data-cache off --decode "$mode" 2>&1 | grep -E "^(nvJPEG|GPU|streaming|data|decode|epoch|kiln)"
done
echo "== data set resident on the GPU (--data-cache on), the reference"
"$build/kiln" "${common[@]}" --data-cache on 2>&1 | grep -E "^(warm-up|epoch)"
