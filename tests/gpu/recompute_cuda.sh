#!/bin/sh
# Activation checkpointing on CUDA (issue 12, memory): resnet18 trained 3 steps from the
# anymodel image folder as it is, then under a --memory-limit 1% of its activations below
# its planned peak (on CUDA recomputing every cheap value frees only ~2% of this small
# network's activations: the arena's peak lies where the backward holds gradients), which
# must recompute some forward values and end at the same loss; then
# --max-batch for ResNet-50 under 20 GiB (AMP fp16), with and without recomputation.
#   recompute_cuda.sh KILN FOLDER
set -u
KILN=$1 DATA=$2
fail() { echo "FAIL: $*"; exit 1; }
# --deterministic: cuDNN's backward algorithms with atomic sums make two runs differ (two
# plain runs on an H100: last losses 2.5480 and 2.5495; with it 2.5503 both times)
run() { "$KILN" train resnet18 --device cuda --data "$DATA" --image-size 64 --batch 32 --epochs 1 --max-steps 3 --deterministic "$@" 2>&1; }
base=$(run) || fail "training without a limit: $base"
echo "$base"
set -- $(echo "$base" | sed -n 's/^memory: step at batch 32: peak \([0-9.]*\) MiB = activations \([0-9.]*\).*/\1 \2/p')
[ $# -eq 2 ] || fail "no 'memory: step at batch 32: peak ... activations ...' line"
limit=$(awk -v p="$1" -v a="$2" 'BEGIN { printf "%.0f", (p - 0.01 * a) * 1048576 }')
rec=$(run --memory-limit "$limit") || fail "training under --memory-limit $limit: $rec"
echo "$rec"
echo "$rec" | grep -q "forward values recomputed" || fail "nothing recomputed under $limit bytes"
l1=$(echo "$base" | sed -n 's/.*last loss \([0-9.]*\).*/\1/p' | tail -1)
l2=$(echo "$rec" | sed -n 's/.*last loss \([0-9.]*\).*/\1/p' | tail -1)
[ -n "$l1" ] && [ "$l1" = "$l2" ] || fail "last loss $l1 without, $l2 with recomputation"
off=$(run --memory-limit "$limit" --recompute off) && fail "--recompute off under $limit bytes must not fit: $off"
echo "$off" | grep -q "the memory limit is $limit bytes" || fail "the error does not name the limit: $off"
mb=$("$KILN" train resnet50 --device cuda --amp fp16 --memory-limit 20G --max-batch 2>&1) || fail "--max-batch: $mb"
echo "$mb"
echo "$mb" | grep -Eq "max batch: [1-9][0-9]* without recomputation, [1-9][0-9]* with" || fail "--max-batch's answer"
echo ok
