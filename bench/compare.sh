#!/usr/bin/env bash
# compare.sh — two builds of kiln, A and B, timed against each other in one GPU call:
# ResNet-50 fp16 inference at batch 256 and batch 1 (`kiln bench`, GPU compute and end to
# end), and mnist-net's AMP fp16 training on Fashion-MNIST (`kiln train --amp fp16`, two
# epochs: the first after the warm-up, the second steady). The runs alternate A B B A ...
# for ROUNDS rounds, so drift of the card's clocks or temperature falls on both; the table
# gives each build's median, its spread and B/A.
#
# Here (a machine with kiln's build dependencies), e.g. for the commit before a change (A)
# and the working tree (B):
#   git worktree add /tmp/kiln-a COMMIT
#   cmake -S /tmp/kiln-a -B /tmp/kiln-a/build-cuda -DCMAKE_BUILD_TYPE=Release \
#         -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build /tmp/kiln-a/build-cuda -j2
#   (the same for this tree into build-cuda)
#   bench/compare.sh pack /tmp/kiln-a/build-cuda build-cuda
#                     packs both builds into .carry/cmp/{a,b} (kiln and the gpu-labelled
#                     tests, gzipped) and Fashion-MNIST into .carry/data: ~45 MB
# On the GPU machine, in one call carrying .carry/cmp and .carry/data (the working tree
# and the carried paths travel together within 64 MiB):
#   bench/compare.sh [A B]      default A=.carry/cmp/a B=.carry/cmp/b; ~2-3 minutes at
#                               ROUNDS=5
# A and B may also be build directories (kiln at the top, tests under tests/).
#
# Environment:
#   ROUNDS=5           rounds of A and B
#   DATA=.carry/data   Fashion-MNIST's four .gz files
#   R50=/tmp/r50.onnx  the ResNet-50 model (exported with torchvision if missing)
#   TESTS=0            1: run each build's GPU tests (gpu_tests.txt) before timing
#   CACHE=fresh        seed=DIR: every run starts from a copy of one algorithm cache, DIR's
#                      cudnn-algos.txt filled further by one untimed run of A per kind, so
#                      both builds run the same cuDNN/cuBLASLt choices and the table
#                      compares the code, not the luck of a timing search (NOTES.md: a fresh
#                      search picks a 10x slower fused convolution on some runs);
#                      fresh: every run searches its cuDNN/cuBLASLt algorithms anew in an
#                      empty cache (one run's unlucky pick cannot carry over to the others,
#                      as a cached slow choice once did: NOTES.md); shared: one cache per
#                      build, filled by an untimed first run
#   BENCH_ARGS_A, BENCH_ARGS_B, TRAIN_ARGS_A, TRAIN_ARGS_B   extra arguments for one build
#                      (the defaults are flags both bc8aa92's CLI and later ones take)
#   DEVICE=cuda        cpu tries the script's plumbing on a machine without a GPU (with a
#                      small R50 model and TRAIN_ARGS_*="--max-steps 20")
# Writes $OUT/compare.txt (the table) and $OUT/compare-logs.tar.gz (every run's output).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. bench/common.sh

if [ "${1:-}" = pack ]; then
  [ $# -eq 3 ] || { echo "usage: bench/compare.sh pack BUILD_A BUILD_B" >&2; exit 2; }
  kiln_pack "$2" .carry/cmp/a nogelu && kiln_pack "$3" .carry/cmp/b nogelu && kiln_pack_data .carry/data || exit 1
  du -sh .carry
  exit 0
fi

A=${1:-.carry/cmp/a}
B=${2:-.carry/cmp/b}
ROUNDS=${ROUNDS:-5}
DATA=${DATA:-.carry/data}
R50=${R50:-/tmp/r50.onnx}
O=${OUT:-/tmp}
LOGS=$(mktemp -d /tmp/compare-logs.XXXXXX)
mkdir -p "$O"
kiln_env "$A" "$B"
KA=$(kiln_unpack "$A" kiln) && KB=$(kiln_unpack "$B" kiln) || exit 2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader 2>/dev/null
echo "A: $A ($KA)"
echo "B: $B ($KB)"
r50_onnx "$R50" || exit 2
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || { echo "no Fashion-MNIST in $DATA (bench/compare.sh pack)" >&2; exit 2; }

rc=0
if [ "${TESTS:-0}" = 1 ]; then
  for side in A B; do
    dir=$A; [ $side = B ] && dir=$B
    [ -f "$dir/gpu_tests.txt" ] || continue
    echo "== $side: GPU tests"
    kiln_gpu_tests "$dir" "$LOGS" "$side" || rc=1
  done
fi

# one measurement: side (A/B), kind (b256/b1/train), round; output kept in $LOGS
measure() {
  local side=$1 kind=$2 round=$3 k extra cache log=$LOGS/$2-$1-$3.log
  if [ "$side" = A ]; then k=$KA; else k=$KB; fi
  cache=$LOGS/cache-$side
  [ "${CACHE:-fresh}" = fresh ] && cache=$LOGS/cache-$side-$kind-$round
  case ${CACHE:-fresh} in
  seed=*)
    cache=$LOGS/cache-$side-$kind-$round
    if [ "$round" = 0 ]; then cache=$LOGS/seed; else mkdir -p "$cache" && cp "$LOGS/seed/"* "$cache/"; fi
    ;;
  esac
  mkdir -p "$cache"
  case $kind in
  b256 | b1)
    if [ "$side" = A ]; then extra=${BENCH_ARGS_A:-}; else extra=${BENCH_ARGS_B:-}; fi
    local b=${kind#b} iters=50 warm=5
    [ "$b" = 1 ] && iters=200 warm=20
    # shellcheck disable=SC2086
    KILN_CACHE_DIR=$cache "$k" bench "$R50" --device "${DEVICE:-cuda}" --batch "$b" --iters $iters --warmup $warm --fp16 \
      $extra > "$log" 2>&1
    ;;
  train)
    if [ "$side" = A ]; then extra=${TRAIN_ARGS_A:-}; else extra=${TRAIN_ARGS_B:-}; fi
    # shellcheck disable=SC2086
    KILN_CACHE_DIR=$cache "$k" train mnist-net --data "$DATA" --device "${DEVICE:-cuda}" --amp fp16 --epochs 2 --seed 1 \
      $extra > "$log" 2>&1
    ;;
  esac
  local st=$?
  if [ $st -ne 0 ]; then
    echo "$side $kind round $round failed (exit $st):" >&2
    tail -5 "$log" >&2
    rc=1
  fi
}

case ${CACHE:-fresh} in
fresh) ;;
seed=*)
  mkdir -p "$LOGS/seed"
  [ -f "${CACHE#seed=}/cudnn-algos.txt" ] && cp "${CACHE#seed=}/cudnn-algos.txt" "$LOGS/seed/"
  for kind in b256 b1 train; do measure A $kind 0; done
  ;;
*) for side in A B; do for kind in b256 b1 train; do measure $side $kind 0; done; done ;;
esac
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then order="A B"; else order="B A"; fi
  for kind in b256 b1 train; do
    for side in $order; do measure "$side" "$kind" "$r"; done
  done
  echo "round $r of $ROUNDS done"
done

python3 - "$LOGS" "$ROUNDS" <<'PY' | tee "$O/compare.txt"
import glob, os, re, statistics, sys
logs, rounds = sys.argv[1], int(sys.argv[2])

def bench(text, what):
    m = re.search(what + r"[^\n]*?median\s+([0-9.]+)", text)
    return float(m.group(1)) if m else None

def train(text, epoch):
    # the last progress line of the epoch: "epoch E/N step S/S  R steps/s" -> S / R seconds
    # (the "epoch E: X s" line rounds to 10 ms, too coarse here)
    best = None
    for m in re.finditer(r"^epoch %d/\d+ step (\d+)/(\d+)\s+([0-9.]+) steps/s" % epoch, text, re.M):
        if m.group(1) == m.group(2):
            best = int(m.group(1)) / float(m.group(3))
    if best is None:
        m = re.search(r"^epoch %d: ([0-9.]+) s" % epoch, text, re.M)
        best = float(m.group(1)) if m else None
    return best

def accuracy(text):
    m = re.search(r"^test accuracy: ([0-9.]+)", text, re.M)
    return float(m.group(1)) if m else None

rows = [("ResNet-50 fp16 bs 256, GPU compute ms", "b256", lambda t: bench(t, "GPU compute")),
        ("ResNet-50 fp16 bs 256, end to end ms", "b256", lambda t: bench(t, "latency")),
        ("ResNet-50 fp16 bs 1, GPU compute ms", "b1", lambda t: bench(t, "GPU compute")),
        ("ResNet-50 fp16 bs 1, end to end ms", "b1", lambda t: bench(t, "latency")),
        ("mnist-net AMP fp16 epoch 1 s", "train", lambda t: train(t, 1)),
        ("mnist-net AMP fp16 epoch 2 s", "train", lambda t: train(t, 2)),
        ("mnist-net test accuracy", "train", accuracy)]

def values(kind, side, fn):
    out = []
    for r in range(1, rounds + 1):
        p = os.path.join(logs, "%s-%s-%d.log" % (kind, side, r))
        v = fn(open(p).read()) if os.path.exists(p) else None
        if v is not None: out.append(v)
    return out

print("%-40s %10s %10s %7s  %-17s %-17s %s" % ("metric (median of rounds)", "A", "B", "B/A", "A min-max", "B min-max", "n"))
worst = None
for name, kind, fn in rows:
    a, b = values(kind, "A", fn), values(kind, "B", fn)
    if not a or not b:
        print("%-40s %10s %10s" % (name, "%.4g" % statistics.median(a) if a else "-", "%.4g" % statistics.median(b) if b else "-"))
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    ratio = mb / ma if ma else float("nan")
    print("%-40s %10.4g %10.4g %7.3f  %-17s %-17s %d/%d" % (name, ma, mb, ratio, "%.4g-%.4g" % (min(a), max(a)),
          "%.4g-%.4g" % (min(b), max(b)), len(a), len(b)))
    if "accuracy" not in name and (worst is None or ratio > worst[1]): worst = (name, ratio)
if worst:
    print("slowest B/A: %.3f (%s): %s" % (worst[1], worst[0],
          "B within 3% of A" if worst[1] <= 1.03 else "B MORE THAN 3% SLOWER than A"))
PY
tar -czf "$O/compare-logs.tar.gz" -C "$LOGS" --exclude='cache-*' . 2>/dev/null
exit $rc
