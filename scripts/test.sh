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
# OpenBLAS 0.3.21 (Debian 12's) takes CPUs newer than it knows for generic ones: on a
# Sapphire Rapids VM it ran its Prescott (SSE3) kernels, whose other rounding put
# pad_channels' gradients and dist_same_np3's 3-rank trajectory past the tolerances that
# OpenBLAS's AVX kernels keep them well inside (bench/NOTES.md, twenty-seventh session).
# Where it says so and the CPU has AVX-512 (SkylakeX's set) or AVX2 + FMA, the suite runs
# with the matching kernels; an OPENBLAS_CORETYPE already set is kept.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && command -v python3 >/dev/null; then
  core=$(python3 - <<'PY' 2>/dev/null || true
import ctypes, ctypes.util
for name in ("libopenblas.so.0", ctypes.util.find_library("openblas")):
    try:
        lib = ctypes.CDLL(name)
        lib.openblas_get_corename.restype = ctypes.c_char_p
        print(lib.openblas_get_corename().decode())
        break
    except Exception:
        pass
PY
)
  flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
  has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
  case "$core" in
    Prescott|Core2|Penryn|Dunnington|Nehalem|Atom|Katmai|Coppermine|Northwood|Banias|generic)
      want=""
      if has avx512f && has avx512vl && has avx512bw && has avx512dq && has avx512cd; then want=SkylakeX
      elif has avx2 && has fma; then want=Haswell
      fi
      if [ -n "$want" ]; then
        echo "kiln: OpenBLAS took this CPU for $core; the tests run with OPENBLAS_CORETYPE=$want"
        export OPENBLAS_CORETYPE=$want
      fi ;;
  esac
fi
# Each stage's start, in seconds since this script began (the suite's target is 10 minutes
# on two cores: these say where the time goes).
t0=$(date +%s)
stage() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
stage "dependencies"
scripts/deps.sh
# The plain build compiles the CUDA code (nvcc on PATH) only to check it, nothing runs it
# here: to PTX for compute_90 alone ("90-virtual": the compiler's front end and NVVM, with
# their errors and warnings, but not ptxas, whose SASS no test runs), and NVVM without its
# optimizations (KILN_CUDA_CHECK_ONLY: the build 270 -> 156 s on two cores; such a kiln
# refuses to create a CUDA context). A build for the GPU machine is scripts/build.sh's (SASS
# for sm_80 and sm_90, optimized; it resets both in this folder), or set KILN_TEST_CUDA_ARCHS
# (e.g. 90) to have ptxas check the inline PTX here too. MPI on, which CUDA builds leave off by default: the dist_*
# tests (CPU ranks under mpirun) run here too, at every rank count.
# The Python tests' environment (tests/python/venv.sh, ctest's python_venv: mostly pip's
# downloads) is made while the build compiles, so that it no longer holds one of ctest's two
# slots; python_venv then keeps it (KILN_REUSE_VENV=1), or makes it again and reports why
# if this early try failed.
venv_pid=""
if py=$(command -v python3); then
  mkdir -p build
  tests/python/venv.sh "$py" build/venv >build/venv-early.log 2>&1 &
  venv_pid=$!
  trap 'kill "$venv_pid" 2>/dev/null || true' EXIT
fi
stage "build (plain, CUDA code compiled)"
scripts/build.sh -DCMAKE_CUDA_ARCHITECTURES="${KILN_TEST_CUDA_ARCHS:-90-virtual}" -DKILN_CUDA_CHECK_ONLY=ON -DKILN_MPI=ON
if [ -n "$venv_pid" ]; then
  wait "$venv_pid" || echo "kiln: making build/venv early failed (build/venv-early.log); ctest's python_venv tries again"
  trap - EXIT
fi
stage "ctest -L cpu"
(cd build && KILN_REUSE_VENV=1 ctest -L cpu --output-on-failure -j2)
if [ "${KILN_SKIP_SANITIZE:-0}" != 1 ]; then
  stage "again under ASan + UBSan: build"
  # -O1, as ASan's documentation advises: the loads and stores the optimized code makes and
  # every UBSan check stay instrumented, and the hot loops (im2col, pooling: every `kiln
  # train` test evaluates the whole Fashion-MNIST test set) run faster than at -O0 (`kiln
  # train mnist-net --max-steps 2`: 28 -> 12 s CPU; the whole pass fits its timeouts again).
  BUILD=build-asan BUILD_TYPE=Debug scripts/build.sh -DKILN_SANITIZE=ON -DKILN_CUDA=OFF \
    "-DCMAKE_C_FLAGS_DEBUG=-g -O1"
  # Left out here, run in the plain pass above: the 3-rank dist tests (mpirun -np 3 on 2
  # cores), whose 2-rank twins (dist_same_np2, dist_syncbn_np2) run here through the same C;
  # train_mnist (120 mnist-net steps, ~90 s here), whose trainer, loader, checkpoint and
  # amp code the train_cli_* tests run here; recompute_train_cli (~30 s here: ResNet
  # training runs of the CLI under memory limits), whose planner and recomputation code
  # test_recompute (ctest recompute) runs here; and four `kiln train` runs of 2-20 steps
  # whose ~20 s here each are mostly the evaluation of 10,000 test images, through code the
  # other train_* and cli_json_* runs take here: train_profile_cli (cli_json_train_stdout_
  # profile: the profile), train_optim_flags (test_optim_graph: LARS, clipping, the
  # schedules), dist_train_cli (dist_same_np2, dist_accumulate: the data-parallel step) and
  # the docs' PyTorch side-by-sides (docs_pytorch, docs_pytorch_train: PyTorch's CPU time).
  stage "ASan + UBSan: ctest -L cpu"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest -L cpu -E '^(dist_(same|syncbn)_np3|train_mnist|recompute_train_cli|train_profile_cli|train_optim_flags|dist_train_cli|docs_pytorch|docs_pytorch_train)$' \
     --output-on-failure -j2)
fi
if [ "${KILN_SKIP_TSAN:-0}" != 1 ]; then
  # Only the threads test and what it links: libgomp is not instrumented, so the test runs
  # its sessions on 1 CPU thread each (tests/CMakeLists.txt) and the races TSan sees are
  # kiln's own (8 threads of the test over one model, one session shared by two). About 40 s
  # on 2 shared cores, the build of libkiln with -fsanitize=thread included.
  stage "tests/test_threads.c under ThreadSanitizer"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_TSAN=ON -DKILN_CUDA=OFF >/dev/null
  cmake --build build-tsan -j"$(nproc)" --target test_threads
  (cd build-tsan && ctest -R '^threads$' --output-on-failure)
fi
stage "done"
