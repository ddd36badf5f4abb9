#!/bin/sh
# fuzz/coverage.sh — line coverage of the library reached by the fuzz corpora.
#
# Builds the harnesses without libFuzzer or sanitizers, with clang's source-based coverage
# (-fprofile-instr-generate -fcoverage-mapping), into build-cov/ (or $BUILD), runs each
# harness once over every file of its corpus (fuzz/standalone_main.c), and prints
# llvm-cov's report lines: for fuzz_run, src/core/session.c, src/core/plan.c and the total
# of src/ops/; for every harness, the files it exists for; and the total of each.
#
#   fuzz/coverage.sh                         # every harness over its corpus in fuzz/
#   fuzz/coverage.sh fuzz_run DIR...         # one harness over other folders (e.g. a grown corpus)
#
# Needs clang, llvm-profdata and llvm-cov (clang 14's). Run from the repository root.
set -eu
BUILD=${BUILD:-build-cov}
FLAGS="-fprofile-instr-generate -fcoverage-mapping"
CC=clang cmake -S . -B "$BUILD" -DKILN_FUZZ=ON -DKILN_FUZZ_STANDALONE=ON -DKILN_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="$FLAGS" >/dev/null
cmake --build "$BUILD" --target fuzz_all -j2 >/dev/null
mkdir -p "$BUILD/prof"

corpus() {
    case $1 in
        fuzz_onnx) echo fuzz/corpus ;;
        fuzz_run) echo fuzz/corpus_run ;;
        *) echo "fuzz/corpus_${1#fuzz_}" ;;
    esac
}
files() {
    case $1 in
        fuzz_onnx) echo src/io/onnx.c ;;
        fuzz_run) echo src/io/onnx.c src/core/session.c src/core/plan.c ;;
        fuzz_safetensors) echo src/io/safetensors.c ;;
        fuzz_idx) echo src/data/idx.c ;;
        fuzz_npy) echo src/io/npy.c ;;
        fuzz_onnx_pb) echo src/io/onnx.c ;;
    esac
}

if [ $# -gt 0 ]; then
    harnesses=$1
    shift
    dirs="$*"
else
    harnesses="fuzz_run fuzz_onnx fuzz_safetensors fuzz_idx fuzz_npy fuzz_onnx_pb"
    dirs=""
fi

for h in $harnesses; do
    rm -f "$BUILD/prof/$h".*
    # OMP_WAIT_POLICY: the runs are single-threaded; no spinning on a busy machine
    LLVM_PROFILE_FILE="$BUILD/prof/$h.profraw" OMP_WAIT_POLICY=passive \
        "$BUILD/fuzz/$h" ${dirs:-$(corpus "$h")} >"$BUILD/prof/$h.log" 2>&1 ||
        { echo "$h failed on its corpus: see $BUILD/prof/$h.log" >&2; exit 1; }
    llvm-profdata merge -sparse "$BUILD/prof/$h.profraw" -o "$BUILD/prof/$h.profdata"
    report() { llvm-cov report "$BUILD/fuzz/$h" -instr-profile="$BUILD/prof/$h.profdata" "$@"; }
    echo "== $h over ${dirs:-$(corpus "$h")}: $(tail -n 1 "$BUILD/prof/$h.log")"
    report | sed -n 1,2p | cut -c1-200
    for f in $(files "$h"); do report "$PWD/$f" | grep -F "$f" | sed "s|$PWD/||"; done
    if [ "$h" = fuzz_run ]; then
        echo "src/ops/ (all files): $(report "$PWD/src/ops" | grep '^TOTAL')"
    fi
    echo "whole library: $(report "$PWD/src" | grep '^TOTAL')"
done
