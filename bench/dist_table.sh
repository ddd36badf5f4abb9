#!/bin/bash
# dist_table.sh — issue 15's table on one multi-GPU host, kiln and PyTorch DDP in the same run:
# ResNet-50 training, AMP fp16, data on the GPUs (random CIFAR-format images at 224x224), batch 256
# a GPU on 1, 2 and G GPUs (kiln launch / torchrun bench/ddp_torch.py), SyncBatchNorm at G, G ranks
# of test_dist_gpu --syncbn, batch 32 at 1, 2 and G, SyncBatchNorm at 2, NCCL's all-reduce bus
# bandwidth (bench/allreduce_bw.py), and a CUPTI trace of the G-GPU step (bench/overlap.py: the
# all-reduces beside backward). G = the host's GPU count (DIST_GPUS to set it). Run from the
# repository root on the GPU machine with a pack in .carry/kiln (bench/gpu.sh pack build-cuda):
#   bash bench/dist_table.sh        (logs and traces under $OUT)
# It is the thirty-third session's calls A and B (.carry/s33a.sh, s33b.sh: 295 and 277 s on 4
# H200s) in one file, so about 10 minutes: at the device tool's limit for one command; their
# numbers are in bench/NOTES.md, thirty-third session.
set -u
T0=$SECONDS
. bench/common.sh
K=.carry/kiln
kiln_env "$K"
KILN=$(kiln_unpack "$K" kiln) || exit 2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
"$KILN" version | head -2
nvidia-smi topo -m | head -6
python3 - <<'PY'
import numpy as np, os
r = np.random.default_rng(0); os.makedirs("/tmp/cif", exist_ok=True)
for name, m in (("data_batch_1.bin", 40960), ("test_batch.bin", 256)):
    rec = np.empty((m, 3073), np.uint8); rec[:, 0] = r.integers(0, 10, m); rec[:, 1:] = r.integers(0, 256, (m, 3072))
    rec.tofile("/tmp/cif/" + name)
PY
kt() {
  local n=$1 b=$2 tag=$3; shift 3
  local envs=(X=1)
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ "${1:-}" = -- ] && shift
  local log=$OUT/k_${tag}.log t1=$SECONDS
  env "${envs[@]}" timeout -s KILL 120 "$KILN" launch --nproc "$n" -- "$KILN" train resnet50 --data /tmp/cif --image-size 224 \
    --batch "$b" --device cuda --amp fp16 --epochs 3 --no-augment --classes 1000 "$@" > "$log" 2>&1 || echo "kiln $tag: exit $?"
  python3 - "$log" "$n" "$b" "$tag" "${envs[*]:-}" "$((SECONDS - t1))" <<'PY'
import re, sys
log, n, b, tag, env, sec = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
rates = []
for line in open(log):
    m = re.match(r"epoch (\d+)/\d+ step (\d+)/(\d+)\s+([\d.]+) steps/s", line)
    if m and m.group(2) == m.group(3) and int(m.group(1)) >= 2: rates.append(float(m.group(4)))
print("kiln %-8s %d GPU(s) b%d [%s]: steps/s %s -> %.0f img/s (%ss)" % (tag, n, b, env, rates, (min(rates) * b * n) if rates else 0, sec))
PY
}
tt() { local t1=$SECONDS; timeout -s KILL 100 torchrun --nproc_per_node "$1" bench/ddp_torch.py --batch "$2" "${@:3}" 2>&1 | grep -v -i warn | tail -1; echo "  ($((SECONDS - t1))s)"; }
echo "== all-reduce  [t=$((SECONDS-T0))]"
timeout -s KILL 60 torchrun --nproc_per_node ${DIST_GPUS:-$(nvidia-smi -L | grep -c '^GPU')} bench/allreduce_bw.py 2>&1 | grep all-reduce
timeout -s KILL 60 torchrun --nproc_per_node 2 bench/allreduce_bw.py 2>&1 | grep all-reduce
echo "== batch 256  [t=$((SECONDS-T0))]"
G=${DIST_GPUS:-$(nvidia-smi -L | grep -c '^GPU')}
kt $G 256 g$G
tt $G 256
kt 1 256 g1
tt 1 256
kt 2 256 g2
tt 2 256
echo "== SyncBatchNorm  [t=$((SECONDS-T0))]"
kt $G 256 g${G}sbn -- --sync-bn
tt $G 256 --syncbn
TD=$(kiln_unpack "$K" test_dist_gpu) || exit 2
(cd /tmp && timeout -s KILL 90 "$KILN" launch --nproc $G -- "$TD" --syncbn 2>&1 | grep -E "vs plain|^ok|FAIL")
echo "== batch 32  [t=$((SECONDS-T0))]"
kt 1 32 b32g1
tt 1 32
kt $G 32 b32g$G
tt $G 32
kt 2 32 b32g2
tt 2 32
echo "== SyncBN at 2  [t=$((SECONDS-T0))]"
kt 2 256 g2sbn -- --sync-bn
tt 2 256 --syncbn
echo "== trace $G  [t=$((SECONDS-T0))]"
CUPTI_DIR=$(find / -xdev -name 'libcupti.so*' -printf '%h\n' 2>/dev/null | head -1)
LD_LIBRARY_PATH="$CUPTI_DIR:$LD_LIBRARY_PATH" CUDA_INJECTION64_PATH=$(pwd)/.carry/kiln/lib/libkiln_cupti_trace.so \
  KILN_CUPTI_TRACE=$OUT/tr_g${G}_%r.csv timeout -s KILL 100 "$KILN" launch --nproc $G -- "$KILN" train resnet50 --data /tmp/cif \
  --image-size 224 --batch 256 --device cuda --amp fp16 --epochs 2 --no-augment --classes 1000 > $OUT/k_tr_g$G.log 2>&1 || echo "trace: exit $?"
python3 bench/overlap.py $OUT/tr_g${G}_0.csv --step-start gather_batch_kernel --last-ms 300 2>&1 | tail -12
xz -T8 $OUT/tr_g${G}_*.csv && tar -C $OUT -cf $OUT/traces.tar $(cd $OUT && ls tr_*.csv.xz) && rm -f $OUT/tr_*.csv.xz
echo "== end [t=$((SECONDS-T0))]"
cd $OUT && tar -cf logs.tar k_*.log && rm -f k_*.log
