# run23c: after merging fuse-pool's fix and the loss in one node (branch loss2)
set -u
eval "$(tests/gpu/device.sh env)"
O=$OUT/run23c; mkdir -p $O
gunzip -c .carry/gpu/kiln.gz > /tmp/kiln && chmod +x /tmp/kiln
gunzip -c .carry/gpu/test_cuda_ops.gz > /tmp/t && chmod +x /tmp/t
/tmp/t > $O/test_cuda_ops.log 2>&1; grep -E "^FAIL" $O/test_cuda_ops.log | head; tail -1 $O/test_cuda_ops.log
grep -E "loss_output|train streams|matches the CPU" $O/test_cuda_ops.log | head
for a in "--amp fp16" "--amp fp16 --disable fuse-loss" "" "--disable fuse-loss"; do
  f=$O/train$(echo "$a" | tr -d ' -').log
  echo "== $a"; /tmp/kiln train mnist-net --data .carry/data --device cuda --epochs 2 --seed 1 --profile $a > $f 2>&1
  grep -E '^epoch [12]:|whole step' $f; grep -E "LogSoftmax" $f | cut -c1-70
done
