#!/usr/bin/env bash
# The test command: installs dependencies, builds kiln (CUDA code is compiled when nvcc is
# present, but GPU tests need a GPU and are not run here), runs the CPU suite, then runs the
# suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
(cd build && ctest -L cpu --output-on-failure -j2)
if [ "${KILN_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== again under ASan + UBSan =="
  BUILD=build-asan BUILD_TYPE=Debug scripts/build.sh -DKILN_SANITIZE=ON -DKILN_CUDA=OFF
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest -L cpu --output-on-failure -j2)
fi
