#!/bin/sh
# Activation checkpointing on CUDA (issue 12, memory): resnet18 trained 3 steps from the
# anymodel image folder as it is, then under a --memory-limit 1% of its activations below
# its planned peak (on CUDA recomputing every cheap value frees only ~2% of this small
# network's activations: the arena's peak lies where the backward holds gradients), which
# must recompute some forward values and end at the same loss, and just under the least
# that recomputing cheap values reaches (convolutions recomputed); then
# --max-batch for ResNet-50 under 20 GiB (AMP fp16), with and without recomputation.
#   recompute_cuda.sh KILN FOLDER
set -u
KILN=$1 DATA=$2
fail() { echo "FAIL: $*"; exit 1; }
# --deterministic: cuDNN's backward algorithms with atomic sums make two runs differ (two
# plain runs on an H100: last losses 2.5480 and 2.5495; with it 2.5503 both times)
run() { "$KILN" train resnet18 --device ${RC_DEVICE:-cuda} --data "$DATA" --image-size 64 --batch 32 --epochs 1 --max-steps 3 --deterministic "$@" 2>&1; }
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
# Just below the least the cheap values alone reach: convolutions are recomputed too (cuDNN
# may pick another algorithm for a copy: the loss is close, not the same bits)
# (ResNet-50 at 64x64, batch 16: recomputing convolutions reaches ~6% less than the cheap values)
run50() { "$KILN" train resnet50 --device ${RC_DEVICE:-cuda} --data "$DATA" --image-size 64 --batch 16 --epochs 1 --max-steps 3 "$@" 2>&1; }
base50=$(run50) || fail "resnet50 without a limit: $base50"
l1=$(echo "$base50" | sed -n 's/.*last loss \([0-9.]*\).*/\1/p' | tail -1)
cheap=$(run50 --memory-limit 1 --recompute cheap) && fail "a 1-byte limit must not fit: $cheap"
least=$(echo "$cheap" | sed -n 's/.*needs at least \([0-9]*\) bytes.*/\1/p' | head -1)
[ -n "$least" ] || fail "no 'needs at least N bytes' with --recompute cheap: $cheap"
limit2=$((least - 1048576))
rec2=$(run50 --memory-limit "$limit2") || fail "training under --memory-limit $limit2 (cheap values only need $least): $rec2"
echo "$rec2" | grep "^memory"
l3=$(echo "$rec2" | sed -n 's/.*last loss \([0-9.]*\).*/\1/p' | tail -1)
awk -v a="$l1" -v b="$l3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b != "" && d <= 1e-3 * (a < 0 ? -a : a) + 1e-4) }' ||
  fail "last loss $l1 without, $l3 with convolutions recomputed"
off=$(run --memory-limit "$limit" --recompute off) && fail "--recompute off under $limit bytes must not fit: $off"
echo "$off" | grep -q "the memory limit is $limit bytes" || fail "the error does not name the limit: $off"
mb=$("$KILN" train resnet50 --device cuda --amp fp16 --memory-limit 20G --max-batch 2>&1) || fail "--max-batch: $mb"
echo "$mb"
echo "$mb" | grep -Eq "max batch: [1-9][0-9]* without recomputation, [1-9][0-9]* with" || fail "--max-batch's answer"
echo ok
