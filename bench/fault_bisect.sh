#!/usr/bin/env bash
# bench/fault_bisect.sh — which technique an intermittent failure needs: `kiln bench` of one
# model, RUNS times under each option set, every run a fresh process with a fresh algorithm
# cache (choices re-timed), its timed choices logged (KILN_CUDA_CONV_STATS_LOG). Prints, per
# option set, how many runs failed and the first error; then, for the default set, the timed
# choices that differ between a failed and a passing run (the suspects).
#
#   bench/fault_bisect.sh KILN MODEL.onnx [BATCH] [RUNS]
#   OPTS='--disable autotune|--disable streams|KILN_CUDA_DW_GRAPH=0' bench/fault_bisect.sh ...
#
# Option sets are separated by '|'; a word with '=' is an environment variable, others are
# flags of kiln bench. DEVICE (default cuda) and PREC (default --fp16) are passed to every run.
# Logs go to LOGS (default a new /tmp folder). Written for efficientnet_b7's launch failure at
# batch 128 (bench/NOTES.md, the sixteenth session).
set -uo pipefail
KILN=${1:?usage: fault_bisect.sh KILN MODEL.onnx [BATCH] [RUNS]}
MODEL=${2:?usage: fault_bisect.sh KILN MODEL.onnx [BATCH] [RUNS]}
BATCH=${3:-128}
RUNS=${4:-3}
DEVICE=${DEVICE:-cuda}
PREC=${PREC:---fp16}
LOGS=${LOGS:-$(mktemp -d /tmp/fault-bisect.XXXXXX)}
mkdir -p "$LOGS"
IFS='|' read -r -a SETS <<< "${OPTS:-|--disable autotune|--disable streams|--disable cuda-graph|--disable conv-depthwise|--disable conv-gemm|--disable conv-direct|KILN_CUDA_CONV_GRAPH=0|KILN_CUDA_DW_GRAPH=0}"

# one run: set index, run index; exit status 0 when kiln bench passed
one() {
  local s=$1 r=$2 envs=() flags=() w log=$LOGS/set$1-run$2
  for w in ${SETS[$s]}; do case $w in *=*) envs+=("$w") ;; *) flags+=("$w") ;; esac; done
  rm -rf "$log.cache" && mkdir -p "$log.cache"
  env "${envs[@]}" KILN_CACHE_DIR="$log.cache" KILN_CUDA_CONV_STATS_LOG=1 \
    timeout "${RUN_TIMEOUT:-180}" "$KILN" bench "$MODEL" --device "$DEVICE" --batch "$BATCH" "$PREC" --iters 20 --warmup 3 \
    "${flags[@]}" > "$log.log" 2>&1
}

# the timed choices of a run, without their times (what was chosen, not how fast)
choices() { grep -E "^kiln conv-bn-stats: conv " "$1" | sed -E 's/[0-9]+\.[0-9]+/T/g' | sort; }

printf '%-40s %s\n' "options" "failed runs (first error)"
for s in "${!SETS[@]}"; do
  failed=0 first=
  for r in $(seq 1 "$RUNS"); do
    if ! one "$s" "$r"; then
      failed=$((failed + 1))
      [ -n "$first" ] || first=$(grep -E "^kiln" "$LOGS/set$s-run$r.log" | grep -v "conv-bn-stats" | head -1 | cut -c1-110)
    fi
  done
  printf '%-40s %d of %d %s\n' "${SETS[$s]:-(default)}" "$failed" "$RUNS" "${first:+($first)}"
done

# the first set's (the default: none) choices: in a failed run and not in a passing one, and the reverse
bad='' good=''
for r in $(seq 1 "$RUNS"); do
  if grep -q "GPU compute\|latency" "$LOGS/set0-run$r.log"; then good=${good:-$LOGS/set0-run$r.log}
  else bad=${bad:-$LOGS/set0-run$r.log}; fi
done
if [ -n "$bad" ] && [ -n "$good" ]; then
  echo "== timed choices of a failed default run ($bad) that the passing one ($good) did not make:"
  comm -23 <(choices "$bad") <(choices "$good") | cut -c1-200
  echo "== and the passing run's that the failed one did not make:"
  comm -13 <(choices "$bad") <(choices "$good") | cut -c1-200
else
  echo "== no pair of a failed and a passing default run to compare"
fi
echo "logs: $LOGS"
