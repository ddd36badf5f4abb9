set -u
eval "$(tests/gpu/device.sh env)"
O=$OUT/run23b; mkdir -p $O
gunzip -c .carry/gpu/kiln.gz > /tmp/kiln && chmod +x /tmp/kiln
gunzip -c .carry/gpu/test_cuda_ops.gz > /tmp/t && chmod +x /tmp/t
/tmp/t > $O/test_cuda_ops.log 2>&1; grep -E "^FAIL" $O/test_cuda_ops.log | head; tail -1 $O/test_cuda_ops.log
for a in "--amp fp16" "--amp fp16 --disable fuse-pool" "" "--disable fuse-pool"; do
  f=$O/train$(echo "$a" | tr -d ' -').log
  echo "== $a"; /tmp/kiln train mnist-net --data .carry/data --device cuda --epochs 2 --seed 1 --profile $a > $f 2>&1
  grep -E '^epoch 2:|whole step' $f; grep -E "MaxPool|Dropout|UnaryGrad  *relu2" $f | cut -c1-70
done
for a in "" "--disable fuse-pool"; do
ncu --clock-control none -k regex:"dropout_nhwc|dropout_grad_nhwc|pool2x2|maxpool_grad|unary_grad" --launch-count 6 --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy /tmp/kiln train mnist-net --data .carry/data --device cuda --epochs 1 --max-steps 2 --amp fp16 $a > $O/ncu$(echo "$a" | tr -d ' -').txt 2>&1
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Stall" $O/ncu$(echo "$a" | tr -d ' -').txt | head -60
done
