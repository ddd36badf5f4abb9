# shellcheck shell=bash
# bench/common.sh — what bench/gpu.sh and bench/compare.sh share (sourced, not run).
#
# The GPU machine has CUDA, cuDNN, PyTorch and torchvision but not kiln's build
# dependencies and no network, so kiln is built here, packed into .carry/ (ignored by git)
# and carried: `pack` copies a build's kiln, its GPU test programs (the tests ctest runs
# under label gpu, with their command lines) and gelu_fusion if built, stripped and
# gzipped, plus libgomp, which that machine may lack.

# kiln_pack BUILD_DIR DEST [nogelu]: DEST/programs.tar.xz holding kiln, every build-tree program
# a gpu-labelled test runs, gelu_fusion and cudnn_fusion_probe (if built, unless nogelu), all
# stripped (and bn_train, likewise); DEST/gpu_tests.txt, DEST/programs.txt, DEST/lib/. One solid xz stream with a
# 256 MiB dictionary: the programs share most of their code (each links all of kiln), so
# every program after the first costs little (one .xz per program: ~9.5 MB each, over the
# 64 MiB carry with seven tests).
kiln_pack() {
  local build=$1 dest=$2 gelu=${3:-gelu} src
  src=$(pwd)
  [ -x "$build/kiln" ] || { echo "pack: no $build/kiln (build it first)" >&2; return 2; }
  # the GPU machine has no cairo: a kiln linked to it does not start there
  if ldd "$build/kiln" | grep -q libcairo; then
    echo "pack: $build/kiln links libcairo, which the GPU machine lacks; configure with -DKILN_PLOT=OFF" >&2
    return 2
  fi
  rm -rf "$dest"
  mkdir -p "$dest/lib" "$dest/stage"
  strip --strip-all -o "$dest/stage/kiln" "$build/kiln" || return 2
  local extra
  for extra in gelu_fusion cudnn_fusion_probe bn_train; do
    [ "$gelu" = gelu ] && [ -x "$build/$extra" ] && { strip --strip-all -o "$dest/stage/$extra" "$build/$extra" || return 2; }
  done
  # The tests labelled gpu, in ctest's order with the fixtures they need (as `ctest -L gpu`
  # runs them), scripts included: gpu_tests.txt has one line per test,
  # "name<TAB>skip exit code or -<TAB>working dir<TAB>command", the command shell-quoted with
  # the build tree written "$B" and the source tree "$S" (kiln_gpu_tests sets them);
  # programs.txt the build-tree programs they run (paths relative to the build tree).
  ctest --test-dir "$build" -L gpu --show-only=json-v1 2>/dev/null | python3 -c '
import json, os, re, shlex, sys
src, build = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
tests, progs = open(sys.argv[3], "w"), []
def q(text):  # shell-quoted, the trees as "$B" / "$S"
    parts = re.split("(" + re.escape(build) + "|" + re.escape(src) + ")", text)
    out = "".join({build: "\"$B\"", src: "\"$S\""}.get(p) or (shlex.quote(p) if p else "") for p in parts)
    return out or "\"\""
for t in json.load(sys.stdin).get("tests", []):
    cmd = t.get("command") or []
    if not cmd: continue
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    for a in cmd:
        for path in re.findall(re.escape(build) + r"/[^ \x27\x22]+", a):
            if os.path.isfile(path) and os.access(path, os.X_OK) and path not in progs: progs.append(path)
    env = props.get("ENVIRONMENT") or []  # (its variables ride on the command: ctest sets them)
    env = [env] if isinstance(env, str) else env
    cmd = (["env"] + list(env) if env else []) + list(cmd)
    tests.write("\t".join([t["name"], str(props.get("SKIP_RETURN_CODE", "-")), q(props.get("WORKING_DIRECTORY", build)),
                            " ".join(q(a) for a in cmd)]) + "\n")
with open(sys.argv[4], "w") as f:
    for p in progs: f.write(os.path.relpath(p, build) + "\n")
' "$src" "$build" "$dest/gpu_tests.txt" "$dest/programs.txt"
  local rel prog
  while read -r rel; do
    prog=$(basename "$rel")
    [ -f "$dest/stage/$prog" ] || strip --strip-all -o "$dest/stage/$prog" "$build/$rel" || return 2
  done < "$dest/programs.txt"
  # KILN_PACK_PRESET: xz preset (default 2: 51 s and 13.9 MB for 16 programs on two cores;
  # 6 took 5 min 26 s for 13.0 MB)
  tar -C "$dest/stage" -cf - . | xz -T1 --lzma2=preset=${KILN_PACK_PRESET:-2},dict=256MiB > "$dest/programs.tar.xz" || return 2
  rm -rf "$dest/stage"
  path=$(ldd "$build/kiln" | awk '$1 == "libgomp.so.1" { print $3 }')
  [ -n "$path" ] && cp -L "$path" "$dest/lib/"
  du -sh "$dest"
}

# kiln_gpu_tests DIR LOGS [TAG]: the tests of a pack's gpu_tests.txt (or, for a build directory,
# `ctest -L gpu` there), each logged to LOGS/test[-TAG]-NAME.log; programs are unpacked into a
# scratch build tree (their places in the build), so scripts and fixtures run as under ctest.
# A test whose program is not in DIR (a trimmed carry), or due after KILN_TESTS_DEADLINE seconds
# of the calling shell, is reported as not run; with KILN_TESTS_ONLY (a regex), only the tests
# whose names match it run. Prints a line
# per test; returns 1 if one failed.
kiln_gpu_tests() {
  local dir=$1 logs=$2 tag=${3:+-$3} B S rel prog name skip wd cmd st rc=0
  if [ -f "$dir/CTestTestfile.cmake" ]; then
    ctest --test-dir "$dir" -L gpu --output-on-failure > "$logs/ctest$tag.log" 2>&1 || rc=1
    grep -E "Test +#|tests passed" "$logs/ctest$tag.log"
    return $rc
  fi
  [ -f "$dir/gpu_tests.txt" ] && [ -f "$dir/programs.txt" ] || { echo "no $dir/gpu_tests.txt (bench/gpu.sh pack)"; return 1; }
  S=$(pwd) B=$(mktemp -d /tmp/kiln-gpu-build.XXXXXX)
  local missing=" "
  while read -r rel; do
    prog=$(basename "$rel")
    mkdir -p "$B/$(dirname "$rel")"
    if prog=$(kiln_unpack "$dir" "$prog" 2>/dev/null); then cp "$prog" "$B/$rel"; else missing+="$rel "; fi
  done < "$dir/programs.txt"
  while IFS=$'\t' read -r name skip wd cmd; do
    for rel in $missing; do
      case $cmd in *"\"\$B\"/$rel"*) echo "== test $name: not run ($rel is not in $dir)"; continue 2 ;; esac
    done
    # KILN_TESTS_ONLY: an extended regex; tests whose names do not match it are left out
    if [ -n "${KILN_TESTS_ONLY:-}" ] && ! [[ $name =~ ^(${KILN_TESTS_ONLY})$ ]]; then continue; fi
    # KILN_TESTS_DEADLINE: no test starts after that many seconds of the calling shell
    if [ -n "${KILN_TESTS_DEADLINE:-}" ] && [ "$SECONDS" -gt "$KILN_TESTS_DEADLINE" ]; then
      echo "== test $name: not run (past KILN_TESTS_DEADLINE=$KILN_TESTS_DEADLINE s)"; continue
    fi
    echo "== test $name"
    (eval "cd $wd" && eval "$cmd") > "$logs/test$tag-$name.log" 2>&1
    st=$?
    if [ "$skip" != - ] && [ $st -eq "$skip" ]; then echo "skipped (exit $st)"
    elif [ $st -ne 0 ]; then echo "FAILED (exit $st)"; rc=1; fi
    grep -E "^FAIL" "$logs/test$tag-$name.log" | head -30
    tail -1 "$logs/test$tag-$name.log"
  done < "$dir/gpu_tests.txt"
  return $rc
}

# pack_data [DEST]: the four Fashion-MNIST .gz files kiln train reads (default .carry/data)
kiln_pack_data() {
  local dest=${1:-.carry/data} from=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
  mkdir -p "$dest"
  cp "$from"/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz "$dest/"
  du -sh "$dest"
}

# kiln_env DIR...: LD_LIBRARY_PATH for the carried programs (their lib/ and wherever this
# machine keeps cuDNN, cuBLASLt, NVRTC and NCCL, which kiln loads for data parallelism:
# the CUDA toolkit or PyTorch's wheels)
kiln_env() {
  local dirs d
  dirs=$(find /usr/local /usr/lib /opt -xdev \( -name 'libcudnn.so.9' -o -name 'libcublasLt.so.13' \
           -o -name 'libnvrtc.so.13' -o -name 'libnccl.so.2' \) -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
  for d in "$@"; do [ -d "$d/lib" ] && dirs="$(cd "$d/lib" && pwd):$dirs"; done
  export LD_LIBRARY_PATH="${dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# kiln_unpack DIR PROG: the path of an executable PROG from DIR (a pack: PROG from its
# programs.tar.xz, or an older pack's PROG.xz / PROG.gz, unpacked into /tmp once; or a build
# directory: PROG itself, or tests/PROG)
kiln_unpack() {
  local dir=$1 prog=$2 out
  if [ -x "$dir/$prog" ]; then echo "$dir/$prog"; return; fi
  if [ -x "$dir/tests/$prog" ]; then echo "$dir/tests/$prog"; return; fi
  out=/tmp/kiln-unpacked/$(echo "$dir" | tr -c 'A-Za-z0-9\n' _)
  mkdir -p "$out"
  if [ -f "$dir/programs.tar.xz" ] && [ ! -f "$out/.programs" ]; then
    # (python's lzma and tarfile: the GPU machine may lack xz-utils)
    python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1], "r:xz")
try: t.extractall(sys.argv[2], filter="tar")
except TypeError: t.extractall(sys.argv[2])  # a Python without extraction filters' \
      "$dir/programs.tar.xz" "$out" && touch "$out/.programs" || { echo "cannot unpack $dir/programs.tar.xz" >&2; return 1; }
  fi
  if [ ! -x "$out/$prog" ]; then
    [ -f "$dir/$prog.xz" ] || [ -f "$dir/$prog.gz" ] || { echo "no $prog in $dir" >&2; return 1; }
    if [ -f "$dir/$prog.xz" ]; then
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$dir/$prog.xz" "$out/$prog"
    else gunzip -c "$dir/$prog.gz" > "$out/$prog"; fi &&
      chmod +x "$out/$prog"
  fi
  echo "$out/$prog"
}

# r50_onnx PATH: torchvision's ResNet-50 (random weights, eval mode) exported to ONNX with a
# symbolic batch, as every ResNet-50 timing in NOTES.md used; kept if PATH exists
r50_onnx() {
  local path=$1
  [ -s "$path" ] && return 0
  python3 -c "import sys, torch, torchvision
torch.manual_seed(0)
torch.onnx.export(torchvision.models.resnet50().eval(), (torch.randn(2, 3, 224, 224),), sys.argv[1], dynamo=False,
                  input_names=['x'], output_names=['y'], dynamic_axes={'x': {0: 'b'}, 'y': {0: 'b'}}, opset_version=17)
" "$path" 2>/dev/null
  [ -s "$path" ] || { echo "could not export ResNet-50 to $path (torch, torchvision?)" >&2; return 1; }
}
