#!/usr/bin/env bash
# The test command: installs dependencies, builds kiln (CUDA code is compiled when nvcc is
# present, but GPU tests need a GPU and are not run here), runs the CPU suite, then runs the
# suite again under AddressSanitizer + UndefinedBehaviorSanitizer, and the threads test
# (tests/test_threads.c) under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenMP's idle threads sleep instead of spinning: on a machine whose cores another job
# keeps busy, spinning made 2-thread runs 10-30x slower (kiln.h, "Busy machines").
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
scripts/deps.sh
scripts/build.sh
(cd build && ctest -L cpu --output-on-failure -j2)
if [ "${KILN_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== again under ASan + UBSan =="
  BUILD=build-asan BUILD_TYPE=Debug scripts/build.sh -DKILN_SANITIZE=ON -DKILN_CUDA=OFF
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest -L cpu --output-on-failure -j2)
fi
if [ "${KILN_SKIP_TSAN:-0}" != 1 ]; then
  # Only the threads test and what it links: libgomp is not instrumented, so the test runs
  # its sessions on 1 CPU thread each (tests/CMakeLists.txt) and the races TSan sees are
  # kiln's own (8 threads of the test over one model, one session shared by two). About 40 s
  # on 2 shared cores, the build of libkiln with -fsanitize=thread included.
  echo "== tests/test_threads.c under ThreadSanitizer =="
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_TSAN=ON -DKILN_CUDA=OFF >/dev/null
  cmake --build build-tsan -j"$(nproc)" --target test_threads
  (cd build-tsan && ctest -R '^threads$' --output-on-failure)
fi
