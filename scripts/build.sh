#!/usr/bin/env bash
# Configures and builds kiln into build/ (CUDA backend too when nvcc is on PATH or in
# /usr/local/cuda). Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "$@" >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
