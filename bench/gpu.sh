#!/usr/bin/env bash
# gpu.sh — one call on the GPU machine: kiln's GPU tests, ResNet-50 inference, mnist-net
# training, and PyTorch next to kiln, each part chosen on the command line.
#
# Here (a machine with kiln's build dependencies), after a CUDA build:
#   bench/gpu.sh pack [BUILD_DIR]   (a build with -DKILN_PLOT=OFF: the GPU machine has no cairo)
#                                   packs kiln, the gpu-labelled tests (as `ctest -L gpu` runs
#                                   them, scripts and fixtures included) in one solid
#                                   programs.tar.xz (~19 MB for 14 programs: well inside the
#                                   64 MiB carry; a trimmed carry's missing programs are
#                                   reported as not run),
#                                   gelu_fusion and cudnn_fusion_probe if built
#                                   (-DKILN_BENCH=ON) and
#                                   Fashion-MNIST into .carry/ (default BUILD_DIR build-cuda)
# On the GPU machine, with .carry carried:
#   bench/gpu.sh [PART...]          default: tests r50 train torch
# Parts:
#   tests   every gpu-labelled test of the build (exit status non-zero if one fails)
#   r50     ResNet-50 fp16 at batch 256 and 1 (`kiln bench`; PROFILE=1 adds per-layer
#           profiles, ABLATE_R50=1 the value of each technique at batch 256)
#   train   mnist-net on CUDA, 2 epochs, each configuration of TRAIN_CONFIGS (separated by
#           '|'; default f32, --amp fp16, --amp bf16), then --amp fp16 with each technique
#           of ABLATE (e.g. ABLATE="fuse-pool streams") switched off; PROFILE=1 adds the step
#           profile
#   torch   bench/reference/torch_train.py: PyTorch's mnist-net epoch (as shipped, tuned,
#           expert) and ResNet-50 training, on the same data
#   side    bench/side_by_side.py: kiln next to PyTorch eager / torch.compile on torchvision
#           models, arguments from SIDE_ARGS (default "--models resnet50,resnet18 --fp16
#           --compile resnet50,resnet18")
#   zoo     bench/zoo_all.py: every torchvision classification and segmentation model, kiln
#           fp32 vs PyTorch fp32, fp16 top-1 agreement, kiln fp16 vs torch.compile and eager at
#           batch 1 and 256; arguments from ZOO_ARGS (default "--models all --time-budget 480":
#           a slice per call), rows appended to $OUT/zoo_all.jsonl; ZOO_PREV=FILE (the
#           jsonl of earlier calls, carried) is copied there first, so its models are skipped
#   gelu    gelu_fusion: generated elementwise fusion against the copy floor
#   cudnnfuse  bench/cudnn_fusion_probe.c: which conv+BN fusions of cuDNN's graph API (genstats,
#           scale+bias+ReLU prologue, BN finalize, dgrad+dReLU+dBN, wgrad with the prologue) run
#           on this GPU for ResNet-50's NHWC fp16 shapes at batch 256, checked and timed against
#           the legacy API; arguments from CUDNNFUSE_ARGS (e.g. "--shapes 1,2 --patterns a,b,c");
#           the full log is $OUT/cudnn_fusion_probe.log, the summary table is printed. Never run
#           yet: written without a GPU. The lead's one call (a few minutes):
#             bench/gpu.sh pack   (here, after building the target cudnn_fusion_probe), then on
#             the GPU machine: bench/gpu.sh cudnnfuse
#   ab      kiln under several environments (switches), each against the plain run in
#           the same call: ResNet-50 AMP training at batch 256 (random CIFAR-format images
#           resized to 224, epoch 2's time, as every training figure in NOTES.md) with each
#           environment of AB_ENVS ('|'-separated; '-' is none; default: -, KILN_CUDA_CONV_STATS=0,
#           KILN_BN_MASK_FROM_X=0, both: what each default is worth), the first config again at the end (drift), then
#           PyTorch AMP + channels_last on the same GPU (bench/ddp_torch.py, one rank).
#           AB_CMD replaces the kiln command (its arguments after `kiln`), e.g. "bench
#           /tmp/z/vit_b_16.onnx --device cuda --batch 256 --fp16 --iters 30" with AB_ENVS
#           "-|KILN_CUDA_FLASH_ATTN=0"; AB_TORCH=0 leaves PyTorch out. An entry's words
#           from the first that starts with -- on are kiln options ("-|--disable space-to-depth").
#           AB_MODELS="vit_b_16:256,
#           swin_v2_s:256" instead: `kiln bench` (fp16, AB_ITERS iterations, default 30) of each
#           torchvision model (exported to /tmp/z first), one A/B each
#   prof    per-node profiles (`kiln bench --profile`, fp16) of the torchvision models of
#           PROF_MODELS (default: the ones slower than torch.compile at batch 256, NOTES.md
#           "z4 / t5 results"), name:batch; full logs in $OUT/prof_MODEL.log, the GPU time and
#           the top rows printed
#   loss    bench/loss_vs_torch.py: kiln's losses against PyTorch's from the same weights
#   diag    bench/diag_fp16.py: a torchvision model (DIAG_MODEL, default mobilenet_v2) in
#           fp16, pass by pass, against fp32
#   choices each model of CHOICE_MODELS (torchvision names, default efficientnet_b4
#           mobilenet_v2 squeezenet1_1 convnext_tiny) at batch CHOICE_BATCH (256) fp16: with a
#           fresh autotune cache and KILN_CUDA_CONV_STATS_LOG=1 (the timed choices' lines that
#           match CHOICE_GREP, default "conv pointwise", printed), then with CHOICE_OFF (an
#           environment, default KILN_CUDA_PW=0) on the same cache, then with the kept choices
#           again: what one timed technique is worth on each model, in one call
#           CHOICE_ALT=PROGRAM: each model also on that kiln program (another build), its own
#           fresh cache, timed and kept
#   ncu     Nsight Compute on one kernel of a model (NCU_MODEL, default mobilenet_v2; NCU_ENV
#           its environment, e.g. KILN_CUDA_PW=1): the launches of kernels matching NCU_KERNEL
#           (a regex, default product_kernel) after NCU_SKIP (1), NCU_COUNT (1) of them, with
#           the sections of NCU_SECTIONS (default: speed of light, occupancy, launch, warp
#           state, scheduler, instruction statistics, source counters); the report's key
#           lines printed, the whole in $LOGS/ncu.log. NCU_SASS=REGEX: also the SASS of the
#           kiln program's functions whose names match it (cuobjdump), to $LOGS/sass.txt
#   sanitize  the GPU op sweep (test_backend_ops) under compute-sanitizer, once per tool of
#           SANITIZE_TOOLS (default "memcheck racecheck initcheck synccheck"), on the ops of
#           SANITIZE_OPS (default all; names as the sweep prints them, space-separated).
#           --nvtx=yes: the sweep's tensors are NVTX regions of the arena (kiln_cuda_arena_alloc),
#           so memcheck sees an access past one tensor into the next. A tool's report (its
#           ERROR SUMMARY and first errors) is printed; the exit status is non-zero if any
#           tool reports an error or the sweep fails under it. Build with
#           -DCMAKE_CUDA_FLAGS=-lineinfo for file:line in the reports. First a planted
#           out-of-bounds access (test_backend_ops --canary) must be reported by memcheck.
#           Each tool's reports are attributed to kernels; racecheck reports that are all in
#           closed NVIDIA library kernels (LIB_KERNELS, a regex) are listed, not failed
#           (bench/NOTES.md, "compute-sanitizer"). (--kernel-name-exclude is no way out:
#           with it racecheck hit "Internal Sanitizer Error" on the sweep.)
# Environment: K=.carry/kiln (the pack, or a build directory), DATA=.carry/data,
# R50=/tmp/r50.onnx. Full logs go to $OUT/gpu-logs.tar.gz (or to LOGS, a folder, as they are
# written: under $OUT they come back even from a call cut off by its limit); the summary is printed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
. bench/common.sh

if [ "${1:-}" = pack ]; then
  kiln_pack "${2:-build-cuda}" .carry/kiln && kiln_pack_data .carry/data || exit 1
  du -sh .carry
  exit 0
fi

K=${K:-.carry/kiln}
DATA=${DATA:-.carry/data}
R50=${R50:-/tmp/r50.onnx}
O=${OUT:-/tmp}
LOGS=${LOGS:-$(mktemp -d /tmp/gpu-logs.XXXXXX)}
mkdir -p "$O" "$LOGS"
kiln_env "$K"
KILN=$(kiln_unpack "$K" kiln) || exit 2
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null
[ $# -eq 0 ] && set -- tests r50 train torch
rc=0

part_tests() {
  kiln_gpu_tests "$K" "$LOGS" || rc=1
}

part_r50() {
  r50_onnx "$R50" || { rc=1; return; }
  local b iters warm log prof=
  [ "${PROFILE:-0}" = 1 ] && prof=--profile
  for b in 256 1; do
    iters=50 warm=5
    [ $b = 1 ] && iters=200 warm=20
    log=$LOGS/r50-b$b.log
    # shellcheck disable=SC2086
    "$KILN" bench "$R50" --device cuda --batch $b --iters $iters --warmup $warm --fp16 $prof > "$log" 2>&1 || rc=1
    echo "resnet50 fp16 bs$b: $(grep -E '^one-time|^latency|^GPU compute|^throughput|kiln:' "$log" | cut -c1-110 | tr '\n' ' ')"
    [ -n "$prof" ] && sed -n '/per-layer/,$p' "$log" | head -24 | cut -c1-170
  done
  if [ "${ABLATE_R50:-0}" = 1 ]; then
    echo "== ResNet-50 fp16 bs 256, each technique off in turn"
    "$KILN" bench "$R50" --device cuda --batch 256 --iters 20 --warmup 3 --fp16 --ablate 2>&1 | tail -16
  fi
}

train_run() {
  local log prof=
  log=$LOGS/train$(echo "$*" | tr -d ' -').log
  [ "${PROFILE:-0}" = 1 ] && prof=--profile
  echo "== kiln train mnist-net --device cuda --epochs 2 --seed 1 $prof $*"
  # shellcheck disable=SC2086
  "$KILN" train mnist-net --data "$DATA" --device cuda --epochs 2 --seed 1 $prof "$@" > "$log" 2>&1 || rc=1
  grep -E '^warm-up|^epoch [0-9]+:|^epoch [0-9]+/[0-9]+ step ([0-9]+)/\1 |accuracy:|skipped|whole step|sum of all|kiln' "$log" |
    cut -c1-150
  [ -n "$prof" ] && sed -n '/per-node profile/,$p' "$log" | sed -n 5,14p | cut -c1-150
}

part_train() {
  [ -f "$DATA/train-images-idx3-ubyte.gz" ] || { echo "no Fashion-MNIST in $DATA"; rc=1; return; }
  local cfg a
  IFS='|' read -r -a cfgs <<< "${TRAIN_CONFIGS:-|--amp fp16|--amp bf16}"
  for cfg in "${cfgs[@]}"; do
    # shellcheck disable=SC2086
    train_run $cfg
  done
  for a in ${ABLATE:-}; do train_run --amp fp16 --disable "$a"; done
}

part_torch() {
  echo "== PyTorch reference (bench/reference/torch_train.py)"
  PYTHONUNBUFFERED=1 python3 bench/reference/torch_train.py "$DATA" > "$LOGS/torch_train.log" 2>&1 || rc=1
  grep -v Warning "$LOGS/torch_train.log" | tail -8
}

part_side() {
  echo "== side by side"
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 python3 bench/side_by_side.py --kiln "$KILN" ${SIDE_ARGS:---models resnet50,resnet18 --fp16 --compile resnet50,resnet18} \
    > "$LOGS/side_by_side.log" 2>&1 || rc=1
  grep -v -i warn "$LOGS/side_by_side.log" | grep -v "torch.onnx.export\|^\s*$" | tail -16
}

part_zoo() {
  echo "== torchvision zoo (bench/zoo_all.py)"
  [ -n "${ZOO_PREV:-}" ] && [ -f "$ZOO_PREV" ] && [ "$ZOO_PREV" != "$O/zoo_all.jsonl" ] && cp "$ZOO_PREV" "$O/zoo_all.jsonl"
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 python3 bench/zoo_all.py --kiln "$KILN" --out "$O/zoo_all.jsonl" \
    ${ZOO_ARGS:---models all --time-budget 480} > "$LOGS/zoo_all.log" 2>&1 || rc=1
  grep -v -i warn "$LOGS/zoo_all.log" | grep -v "torch.onnx.export\|^\s*$" | tail -40
}

part_gelu() {
  local g
  g=$(kiln_unpack "$K" gelu_fusion 2>/dev/null) || { echo "no gelu_fusion in $K (build with -DKILN_BENCH=ON)"; return; }
  echo "== gelu as five ops, fused by NVRTC codegen, vs the copy floor"
  "$g" 2>&1 | tail -12
}

part_cudnnfuse() {
  local p
  p=$(kiln_unpack "$K" cudnn_fusion_probe 2>/dev/null) || {
    echo "no cudnn_fusion_probe in $K (build the target with -DKILN_BENCH=ON, then bench/gpu.sh pack)"
    rc=1
    return
  }
  echo "== cuDNN graph API conv+BN fusions (bench/cudnn_fusion_probe.c; full log: cudnn_fusion_probe.log)"
  # shellcheck disable=SC2086
  timeout "${CUDNNFUSE_TIMEOUT:-540}" "$p" ${CUDNNFUSE_ARGS:-} > "$O/cudnn_fusion_probe.log" 2>&1
  local st=$?
  [ $st -ne 0 ] && { echo "cudnn_fusion_probe: exit $st (1: a wrong result, 2: CUDA error, 124: timeout)"; rc=1; }
  head -1 "$O/cudnn_fusion_probe.log"
  grep -E "MISMATCH|WRONG|CUDA error|cuDNN error|ACCUMULATES" "$O/cudnn_fusion_probe.log" | head -12
  # the table (or, cut short, the last lines)
  if grep -q "^pat " "$O/cudnn_fusion_probe.log"; then sed -n '/^pat /,$p' "$O/cudnn_fusion_probe.log" | cut -c1-230
  else tail -30 "$O/cudnn_fusion_probe.log"; fi
}

# ab_run LABEL ENV...: one kiln command of part_ab under the environment ENV (VAR=VALUE words)
ab_run() {
  local label=$1 log
  shift
  local -a envw=()
  while [ $# -gt 0 ] && [[ $1 != --* ]]; do envw+=("$1"); shift; done # the rest: kiln options
  log=$LOGS/ab-$(echo "$AB_CMD $label" | cut -c1-120 | tr -c 'A-Za-z0-9\n' _).log
  # shellcheck disable=SC2086
  env "${envw[@]}" timeout -s KILL "${AB_TIMEOUT:-180}" "$KILN" $AB_CMD "$@" > "$log" 2>&1
  local st=$?
  echo "-- [$label] exit $st: $(grep -E '^epoch 2:|^GPU compute|^throughput|^memory|^kiln:|error|FAIL' "$log" | cut -c1-140 | tr '\n' ' ')"
}

part_ab() {
  local cfg envs i m
  if [ -n "${AB_MODELS:-}" ]; then # name:batch,...: the same A/B on `kiln bench` of each model
    local spec
    for spec in ${AB_MODELS//,/ }; do
      m=${spec%%:*}
      zoo_onnx "$m"
      AB_MODELS= AB_CMD="bench /tmp/z/$m.onnx --device cuda --batch ${spec#*:} --fp16 --iters ${AB_ITERS:-30}" part_ab
    done
    return
  fi
  if [ -z "${AB_CMD:-}" ]; then
    python3 - <<'PY' || { echo "ab: cannot write the CIFAR-format data"; rc=1; return; }
import numpy as np, os
r = np.random.default_rng(0); os.makedirs("/tmp/ab_cif", exist_ok=True)
for name, m in (("data_batch_1.bin", 5120), ("test_batch.bin", 256)):
    rec = np.empty((m, 3073), np.uint8); rec[:, 0] = r.integers(0, 10, m); rec[:, 1:] = r.integers(0, 256, (m, 3072))
    rec.tofile("/tmp/ab_cif/" + name)
PY
    AB_CMD="train resnet50 --data /tmp/ab_cif --image-size 224 --batch 256 --device cuda --amp fp16 --epochs 2 --no-augment --classes 1000"
  fi
  IFS='|' read -r -a envs <<< "${AB_ENVS:--|KILN_CUDA_CONV_STATS=0|KILN_BN_MASK_FROM_X=0|KILN_CUDA_CONV_STATS=0 KILN_BN_MASK_FROM_X=0}"
  echo "== A/B: kiln $AB_CMD"
  for i in "${!envs[@]}"; do
    cfg=${envs[$i]}
    [ "$cfg" = - ] && cfg=
    # shellcheck disable=SC2086
    ab_run "$i: ${cfg:-plain}" $cfg
  done
  cfg=${envs[0]}
  [ "$cfg" = - ] && cfg=
  # shellcheck disable=SC2086
  ab_run "0 again: ${cfg:-plain}" $cfg
  if [ "${AB_TORCH:-1}" = 1 ] && case $AB_CMD in train\ resnet50*) true ;; *) false ;; esac; then
    echo "-- PyTorch AMP + channels_last, one rank (bench/ddp_torch.py): $(timeout -s KILL 240 torchrun --nproc_per_node 1 \
      bench/ddp_torch.py 2>&1 | grep -v -i warn | tail -1)"
  fi
}

# zoo_onnx NAME...: the torchvision models exported to /tmp/z/NAME.onnx (once)
zoo_onnx() {
  mkdir -p /tmp/z
  PYTHONUNBUFFERED=1 timeout -s KILL 300 python3 - "$@" <<'PY' 2>&1 | grep -v -i "warn\|torch.onnx\|^\s*$" | tail -3
import os, sys
sys.path.insert(0, "bench")
import zoo
for n in sys.argv[1:]:
    if not os.path.exists("/tmp/z/%s.onnx" % n):
        try:
            zoo.export(n, "/tmp/z/%s.onnx" % n)
        except Exception as e:  # the others still exported
            print("zoo_onnx: %s: %s" % (n, e))
PY
}

part_choices() {
  local m b=${CHOICE_BATCH:-256} models=${CHOICE_MODELS:-efficientnet_b4 mobilenet_v2 squeezenet1_1 convnext_tiny}
  # shellcheck disable=SC2086
  zoo_onnx $models
  choice_run() { # LOG ENV...: the median GPU compute time of one bench run
    local log=$1; shift
    env "$@" timeout -s KILL 120 "$KILN" bench "/tmp/z/$m.onnx" --device cuda --batch "$b" --iters 30 --warmup 5 \
      --fp16 > "$log" 2>&1 || rc=1
    grep -E '^GPU compute' "$log" | sed 's/.*median \([0-9.]*\).*/\1 ms/'
  }
  choice_build() { # PROGRAM TAG OFF: timed with a fresh cache, OFF's environment (if any), kept
    local prog=$1 tag=$2 off=$3 cache
    cache=$(mktemp -d /tmp/choices-cache.XXXXXX)
    echo "  ${tag}timed, fresh cache: $(KILN=$prog choice_run "$LOGS/choices_${m}_${tag}timed.log" \
      KILN_CACHE_DIR="$cache" KILN_CUDA_CONV_STATS_LOG=1)"
    grep -E "${CHOICE_GREP:-conv pointwise}" "$LOGS/choices_${m}_${tag}timed.log" | sed 's/^kiln conv-bn-stats: /  /' |
      cut -c1-170 | head -20
    # shellcheck disable=SC2086
    [ -n "$off" ] && echo "  ${tag}$off: $(KILN=$prog choice_run "$LOGS/choices_${m}_${tag}off.log" KILN_CACHE_DIR="$cache" $off)"
    echo "  ${tag}kept: $(KILN=$prog choice_run "$LOGS/choices_${m}_${tag}kept.log" KILN_CACHE_DIR="$cache")"
    rm -rf "$cache"
  }
  for m in $models; do
    echo "== $m bs$b fp16"
    choice_build "$KILN" "" "${CHOICE_OFF:-KILN_CUDA_PW=0}"
    # the same model on another build (CHOICE_ALT), its own fresh cache
    [ -n "${CHOICE_ALT:-}" ] && choice_build "$CHOICE_ALT" "alt-" ""
  done
  return 0
}

part_ncu() {
  local m=${NCU_MODEL:-mobilenet_v2} ncu sec=() s
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { echo "ncu: not found"; rc=1; return; }
  zoo_onnx "$m"
  for s in ${NCU_SECTIONS:-SpeedOfLight Occupancy LaunchStats WarpStateStats SchedulerStats InstructionStats SourceCounters}; do
    sec+=(--section "$s")
  done
  echo "== ncu: $m, kernels /${NCU_KERNEL:-product_kernel}/ after ${NCU_SKIP:-1}, ${NCU_COUNT:-1} of them (${NCU_ENV:-no environment})"
  # shellcheck disable=SC2086
  env ${NCU_ENV:-} timeout -s KILL 300 "$ncu" --clock-control none -k "regex:${NCU_KERNEL:-product_kernel}" \
    --launch-skip "${NCU_SKIP:-1}" --launch-count "${NCU_COUNT:-1}" "${sec[@]}" \
    "$KILN" bench "/tmp/z/$m.onnx" --device cuda --batch 256 --iters 1 --warmup 0 --fp16 > "$LOGS/ncu.log" 2>&1 || rc=1
  grep -E "^  [^ ].*\) \([0-9]+, [0-9]+, [0-9]+\)|Duration|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Instructions|Issued Instructions|Stall|Branch Instructions" \
    "$LOGS/ncu.log" | cut -c1-150 | head -60
  if [ -n "${NCU_SASS:-}" ]; then
    cuobjdump -sass "$KILN" 2>/dev/null | awk -v re="$NCU_SASS" '/Function :/ { on = ($0 ~ re) } on' > "$LOGS/sass.txt"
    echo "SASS of /$NCU_SASS/: $(grep -c 'Function :' "$LOGS/sass.txt") functions, $(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$LOGS/sass.txt") instructions in $LOGS/sass.txt"
  fi
}

part_prof() {
  local mb m b log names=()
  for mb in ${PROF_MODELS:-mobilenet_v3_large:256 shufflenet_v2_x1_0:256 efficientnet_b0:256 convnext_tiny:256 mobilenet_v2:256 vit_b_16:256}; do
    names+=("${mb%:*}")
  done
  zoo_onnx "${names[@]}"
  for mb in ${PROF_MODELS:-mobilenet_v3_large:256 shufflenet_v2_x1_0:256 efficientnet_b0:256 convnext_tiny:256 mobilenet_v2:256 vit_b_16:256}; do
    m=${mb%:*} b=${mb#*:} log=$O/prof_${mb%:*}.log
    timeout -s KILL 90 "$KILN" bench "/tmp/z/$m.onnx" --device cuda --batch "$b" --iters 30 --warmup 5 --fp16 --profile > "$log" 2>&1 || rc=1
    echo "== $m bs$b: $(grep -E '^GPU compute' "$log" | cut -c1-100)"
    sed -n '/per-layer profile/,$p' "$log" | sed -n 3,12p | cut -c1-170
  done
}

part_loss() {
  echo "== loss vs PyTorch from the same weights"
  PYTHONUNBUFFERED=1 python3 bench/loss_vs_torch.py --kiln "$KILN" --data "$DATA" > "$LOGS/loss_vs_torch.log" 2>&1 || rc=1
  tail -30 "$LOGS/loss_vs_torch.log"
}

part_diag() {
  echo "== fp16 pass by pass: ${DIAG_MODEL:-mobilenet_v2}"
  PYTHONUNBUFFERED=1 python3 bench/diag_fp16.py --kiln "$KILN" --model "${DIAG_MODEL:-mobilenet_v2}" 2>&1 |
    grep -v Warn | grep -v torch.onnx.export || rc=1
}

part_sanitize() {
  local cs sweep tool log t0 extra ops
  # kernels of NVIDIA's closed libraries (cuBLASLt's Hopper GEMMs are nvjet_*): racecheck
  # reports in them are shown and counted, but are not kiln's to fix
  local LIB_KERNELS=${LIB_KERNELS:-nvjet_|sm90_xmma|cutlass|cudnn|xmma_}
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null) ||
    { echo "sanitize: no compute-sanitizer on this machine"; rc=1; return; }
  sweep=$(kiln_unpack "$K" test_backend_ops) || { rc=1; return; }
  read -r -a ops <<< "${SANITIZE_OPS:-}"
  # The planted write one float past a tensor must be seen, or a clean sweep proves nothing.
  "$cs" --tool memcheck --nvtx=yes --error-exitcode 86 "$sweep" --canary > "$LOGS/sanitize-canary.log" 2>&1
  if [ $? -eq 86 ] && grep -qE "Invalid __global__ (read|write)" "$LOGS/sanitize-canary.log"; then
    echo "== canary: memcheck reports the planted out-of-bounds access: $(grep -m1 -o 'is [0-9]* bytes after the nearest allocation .*' "$LOGS/sanitize-canary.log")"
  else
    echo "== canary: memcheck did NOT report the planted write: the sanitizer cannot see the arena"; rc=1
    tail -20 "$LOGS/sanitize-canary.log"
  fi
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}; do
    log=$LOGS/sanitize-$tool.log
    extra=(--print-limit 50)
    case $tool in
    memcheck) extra+=(--leak-check full) ;;
    racecheck) extra=(--racecheck-report all --print-limit 100000) ;;
    esac
    t0=$(date +%s)
    "$cs" --tool "$tool" --nvtx=yes --error-exitcode 86 "${extra[@]}" \
      "$sweep" "${ops[@]}" > "$log" 2>&1
    local st=$?
    echo "== compute-sanitizer --tool $tool: exit $st, $(( $(date +%s) - t0 )) s; sweep: $(grep -E '^[0-9]+ passed' "$log" | tail -1)"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY" "$log" | tail -3
    # which kernels the reports are in: kiln's own, or a closed library's (LIB_KERNELS)
    grep -oE "^=========     (Read|Write) Thread \([0-9,]+\) at .*\+0x|^=========     at .*\+0x" "$log" |
      sed -E 's/^=========     ((Read|Write) Thread \([0-9,]+\) )?at //; s/\+0x$//' | sort | uniq -c | sort -rn > "$log.kernels"
    head -12 "$log.kernels"
    if [ $st -ne 0 ]; then
      if [ "$tool" = racecheck ] && [ -s "$log.kernels" ] && ! grep -qvE "^ *[0-9]+ ($LIB_KERNELS)" "$log.kernels" &&
        ! grep -q "^FAIL" "$log"; then
        echo "   every report is in a library kernel ($LIB_KERNELS), none in kiln's; values before/after each reported access:"
        grep -oE "Current Value : [0-9]+, Incoming Value : [0-9]+" "$log" | awk '{sub(",", "", $4); print ($4 == $8 ? "equal" : "different")}' | sort | uniq -c
      else
        rc=1
        grep -E -A8 "^========= (Invalid|Uninitialized|Race|Barrier|Program hit|Error|Leaked|Warning|Internal)" "$log" | head -60
        grep -E "^FAIL" "$log" | head -10
      fi
    fi
  done
}

for part in "$@"; do
  case $part in
  tests | r50 | train | torch | side | zoo | gelu | cudnnfuse | ab | choices | ncu | prof | loss | diag | sanitize) "part_$part" ;;
  *) echo "gpu.sh: unknown part '$part' (tests r50 train torch side zoo gelu cudnnfuse ab choices ncu prof loss diag sanitize)" >&2; rc=2 ;;
  esac
done
tar -czf "$O/gpu-logs.tar.gz" -C "$LOGS" . 2>/dev/null
exit $rc
