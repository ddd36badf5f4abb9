#!/usr/bin/env bash
# NHWC training (v1.5): GPU kernel tests, then epochs and step profiles on CUDA with the
# layout on and off (--disable nhwc) and under fp16 AMP, all in one call.
set -uo pipefail
cd "$(dirname "$0")/.."
eval "$(tests/gpu/device.sh env)"
K=.carry/gpu/kiln
D=.carry/data
O=${OUT:-/tmp}
[ -f .carry/gpu/test_cuda_ops.gz ] && gunzip -c .carry/gpu/test_cuda_ops.gz > /tmp/test_cuda_ops && chmod +x /tmp/test_cuda_ops
/tmp/test_cuda_ops > $O/test_cuda_ops.log 2>&1; grep -E "^FAIL" $O/test_cuda_ops.log | head -20; tail -1 $O/test_cuda_ops.log
grep -E "mnist-net training graph.*(run list|has a CUDA)" $O/test_cuda_ops.log | cut -c1-200
for args in "" "--disable nhwc" "--amp fp16" "--amp bf16"; do
  echo "== kiln train --device cuda --epochs 2 --profile $args"
  $K train mnist-net --data $D --device cuda --epochs 2 --seed 1 --profile $args > $O/train$(echo $args | tr -d ' -').log 2>&1
  grep -E '^epoch [0-9]+:|accuracy|skipped|whole step' $O/train$(echo $args | tr -d ' -').log
  sed -n '/per-node profile/,$p' $O/train$(echo $args | tr -d ' -').log | sed -n 5,22p | cut -c1-160
done
