# shellcheck shell=bash
# bench/common.sh — what bench/gpu.sh and bench/compare.sh share (sourced, not run).
#
# The GPU machine has CUDA, cuDNN, PyTorch and torchvision but not kiln's build
# dependencies and no network, so kiln is built here, packed into .carry/ (ignored by git)
# and carried: `pack` copies a build's kiln, its GPU test programs (the tests ctest runs
# under label gpu, with their command lines) and gelu_fusion if built, stripped and
# gzipped, plus libgomp, which that machine may lack.

# kiln_pack BUILD_DIR DEST [nogelu]: DEST/kiln.xz, DEST/<test>.xz, DEST/gpu_tests.txt,
# DEST/gelu_fusion.xz (unless nogelu), DEST/lib/ (xz: half gzip's size, for the 64 MiB carry)
kiln_pack() {
  local build=$1 dest=$2 gelu=${3:-gelu} src
  src=$(pwd)
  [ -x "$build/kiln" ] || { echo "pack: no $build/kiln (build it first)" >&2; return 2; }
  rm -rf "$dest"
  mkdir -p "$dest/lib"
  strip --strip-all -o "$dest/kiln" "$build/kiln" && xz -T2 -f "$dest/kiln"
  [ "$gelu" = gelu ] && [ -x "$build/gelu_fusion" ] && strip --strip-all -o "$dest/gelu_fusion" "$build/gelu_fusion" &&
    xz -T2 -f "$dest/gelu_fusion"
  # The tests labelled gpu, as ctest would run them: one line per test, "name<TAB>command",
  # the program named by its base name, paths inside the source tree made relative. Tests
  # that run a script or read the build tree (fixtures' outputs) stay out of the pack, named
  # on stderr: they run with ctest on a whole build.
  ctest --test-dir "$build" -L gpu --show-only=json-v1 2>/dev/null | python3 -c '
import json, os, sys
src, build = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
for t in json.load(sys.stdin).get("tests", []):
    cmd = t.get("command") or []
    if not cmd: continue
    if os.path.basename(cmd[0]) in ("sh", "bash") or any(a.startswith(build + "/") for a in cmd[1:]):
        print("kiln_pack: not packed: %s (a script or build-tree files; ctest -L gpu on a whole build runs it)"
              % t["name"], file=sys.stderr)
        continue
    args = [os.path.relpath(a, src) if a.startswith(src + "/") and not a.startswith(build + "/") else a
            for a in cmd[1:]]
    print(t["name"] + "\t" + " ".join([os.path.basename(cmd[0])] + args))
' "$src" "$build" > "$dest/gpu_tests.txt"
  local prog
  while IFS=$'\t' read -r _ prog; do
    prog=${prog%% *}
    [ -f "$dest/$prog.xz" ] && continue
    local path
    path=$(find "$build" -name "$prog" -type f -perm -u+x | head -1)
    [ -n "$path" ] && strip --strip-all -o "$dest/$prog" "$path" && xz -T2 -f "$dest/$prog"
  done < "$dest/gpu_tests.txt"
  path=$(ldd "$build/kiln" | awk '$1 == "libgomp.so.1" { print $3 }')
  [ -n "$path" ] && cp -L "$path" "$dest/lib/"
  du -sh "$dest"
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

# kiln_unpack DIR PROG: the path of an executable PROG from DIR (a pack: PROG.xz or .gz, unpacked
# into /tmp once; or a build directory: PROG itself, or tests/PROG)
kiln_unpack() {
  local dir=$1 prog=$2 out
  if [ -x "$dir/$prog" ]; then echo "$dir/$prog"; return; fi
  if [ -x "$dir/tests/$prog" ]; then echo "$dir/tests/$prog"; return; fi
  [ -f "$dir/$prog.xz" ] || [ -f "$dir/$prog.gz" ] || { echo "no $prog in $dir" >&2; return 1; }
  out=/tmp/kiln-unpacked/$(echo "$dir" | tr -c 'A-Za-z0-9\n' _)
  mkdir -p "$out"
  if [ ! -x "$out/$prog" ]; then
    # (python's lzma: the GPU machine may lack xz-utils)
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
