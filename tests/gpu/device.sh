#!/usr/bin/env bash
# device.sh — run the GPU tests on a machine that has a GPU but not kiln's build
# dependencies (the lent GPU machine: no OpenBLAS, protobuf-c or ONNX headers there).
#
#   here:   tests/gpu/device.sh pack [BUILD_DIR]   copies the test binaries, kiln, the
#           gelu_fusion benchmark and the shared libraries they need that a CUDA machine may
#           lack into .carry/gpu/ (ignored by git)
#   there:  tests/gpu/device.sh run                finds cuDNN, cuBLASLt and NVRTC where
#           that machine has them (CUDA toolkit or the Python wheels), then runs
#           test_cuda_context and test_cuda_ops; exits non-zero if either fails
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.carry/gpu

case "${1:-}" in
pack)
  build=${2:-build-cuda}
  rm -rf "$dest"
  mkdir -p "$dest/lib"
  for t in test_cuda_ops test_cuda_context; do
    strip --strip-debug -o "$dest/$t" "$build/tests/$t"
  done
  strip --strip-debug -o "$dest/kiln" "$build/kiln"
  if [ -x "$build/gelu_fusion" ]; then strip --strip-debug -o "$dest/gelu_fusion" "$build/gelu_fusion"; fi
  # The GPU machine has OpenBLAS (and its Fortran runtime); libgomp may be missing.
  for lib in libgomp.so.1; do
    path=$(ldd "$dest/test_cuda_ops" | awk -v l="$lib" '$1 == l { print $3 }')
    if [ -n "$path" ]; then cp -L "$path" "$dest/lib/"; fi
  done
  du -sh "$dest"
  ;;
env)
  # print the export line that makes the carried binaries find their libraries
  dirs=$(find /usr/local /usr/lib /opt -xdev \( -name 'libcudnn.so.9' -o -name 'libcublasLt.so.13' \
           -o -name 'libnvrtc.so.13' \) -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
  echo "export LD_LIBRARY_PATH=$PWD/$dest/lib:${dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  ;;
run)
  [ -x "$dest/test_cuda_ops" ] || { echo "device.sh: run 'pack' first and carry .carry" >&2; exit 2; }
  eval "$("$0" env)"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  nvidia-smi -L || true
  if ldd "$dest/test_cuda_ops" | grep 'not found'; then exit 3; fi
  rc=0
  "$dest/test_cuda_context" || rc=1
  "$dest/test_cuda_ops" || rc=1
  exit $rc
  ;;
*)
  echo "usage: tests/gpu/device.sh pack [BUILD_DIR] | env | run" >&2
  exit 2
  ;;
esac
