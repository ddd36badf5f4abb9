#!/usr/bin/env bash
# ctest python_package (fixture python_kiln): `pip install .` from the source tree into the
# python_venv fixture's environment, the CPU build (-DKILN_CUDA=OFF), two compile jobs; the
# CMake build directory is kept in WORK so that a rerun compiles only what changed.
# install.sh VENV SOURCE_DIR WORK
set -euo pipefail
venv=$1 src=$2 work=$3
mkdir -p "$work"
start=$(date +%s)
cd "$src"
CMAKE_BUILD_PARALLEL_LEVEL=2 "$venv/bin/python" -m pip install . \
  -C cmake.define.KILN_CUDA=OFF -C build-dir="$work/build" >"$work/pip.log" 2>&1 ||
  { tail -n 60 "$work/pip.log"; echo "python_package: pip install . failed (log: $work/pip.log)" >&2; exit 1; }
tail -n 1 "$work/pip.log"
cd "$work"
"$venv/bin/python" -c "import kiln; print('kiln', kiln.version(), 'from', kiln.__file__)"
echo "python_package: built and installed in $(( $(date +%s) - start )) s"
