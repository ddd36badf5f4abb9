#!/usr/bin/env bash
# Configures and builds kiln into build/ (CUDA backend too when nvcc is on PATH or in
# /usr/local/cuda). Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
BUILD=${BUILD:-build}
# A build for the GPU: Ampere and Hopper machine code, the CUDA code optimized, whatever an
# earlier configure of this folder (scripts/test.sh's check build) left in its cache; the
# arguments after these override them.
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} "-DCMAKE_CUDA_ARCHITECTURES=80;90" \
  -DKILN_CUDA_CHECK_ONLY=OFF "$@" >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
