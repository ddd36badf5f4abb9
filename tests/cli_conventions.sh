#!/bin/sh
# kiln's command-line conventions (issue 16, item 5):
#   cli_conventions.sh KILN SRCDIR WORKDIR help | version | unknown_flag | cache | path_once | trace
# help: every command's --help (and -h, `kiln help CMD`, `kiln --help`) prints its usage
#   on stdout and exits 0.
# version: --version and `version` name kiln's version, the git commit and CUDA's state.
# unknown_flag: an unknown option or a missing value exits 2, naming the option, with the
#   command's usage on stderr; --flag=value works.
# cache: `cache show` finds the file under KILN_CACHE_DIR with its size and entries;
#   `cache clear` removes it, and then has nothing to remove (exit 0).
# path_once: an error about a file names the path once ("kiln: m.onnx: m.onnx: ..." did twice).
# trace: bench --trace writes process_name and thread_name metadata events.
# info_passes: `info --device cpu` and `--device cuda --fp16` add the op counts after the
#   passes (on the CPU FusedConv where Conv, BatchNormalization and Relu were; for CUDA the
#   fp16 Cast and the NHWC conversion), plain `info` does not.
# run_batch: `run --batch 3` of a 4-row input (slices of 3 and 1, one session) writes the
#   outputs of the unsliced run; --batch 0 and an input without rows are refused (exit 2).
set -u
KILN=$1 SRC=$2 DIR=$3 CASE=$4
fail() { echo "FAIL $CASE: $*"; exit 1; }
rm -rf "$DIR" && mkdir -p "$DIR" || fail "cannot make $DIR"
MODEL=$SRC/examples/tiny_cnn.onnx
COMMANDS="run train bench info convert onnx-test compare cache ops version help"

case $CASE in
help)
    for c in $COMMANDS; do
        u="^usage: kiln $c"
        [ $c = help ] && u="^usage: kiln <command>" # help's usage is the whole list
        for h in --help -h; do
            "$KILN" $c $h >"$DIR/out" 2>"$DIR/err" || fail "kiln $c $h exits $?: $(cat "$DIR/err")"
            grep -q "$u" "$DIR/out" || fail "kiln $c $h does not print its usage: $(head -3 "$DIR/out")"
        done
        "$KILN" help $c >"$DIR/out" 2>&1 || fail "kiln help $c exits $?"
        grep -q "$u" "$DIR/out" || fail "kiln help $c does not print its usage"
    done
    for h in --help -h help; do
        "$KILN" $h >"$DIR/out" 2>&1 || fail "kiln $h exits $?"
        for c in $COMMANDS; do grep -q "^  $c" "$DIR/out" || fail "kiln $h does not list $c"; done
    done
    ;;
version)
    v=$(sed -n 's/^#define KILN_VERSION "\(.*\)"/\1/p' "$SRC/include/kiln.h")
    [ -n "$v" ] || fail "no KILN_VERSION in kiln.h"
    for a in --version version; do
        "$KILN" $a >"$DIR/out" 2>&1 || fail "kiln $a exits $?: $(cat "$DIR/out")"
        cat "$DIR/out"
        grep -q "^kiln $v\$" "$DIR/out" || fail "kiln $a does not name version $v"
        grep -q "^git: [0-9a-z-]" "$DIR/out" || fail "kiln $a names no git commit"
        grep -q "^CUDA: \(built in\|not built in\)" "$DIR/out" || fail "kiln $a does not say whether CUDA is built in"
    done
    ;;
unknown_flag)
    for c in run train bench info compare cache ops version onnx-test; do
        "$KILN" $c --no-such-flag >"$DIR/out" 2>"$DIR/err"
        rc=$?
        [ $rc -eq 2 ] || fail "kiln $c --no-such-flag exits $rc, not 2"
        grep -q "unknown option '--no-such-flag'" "$DIR/err" || fail "kiln $c: the message does not name the flag: $(cat "$DIR/err")"
        grep -q "^usage: kiln $c" "$DIR/err" || fail "kiln $c: no usage on stderr"
    done
    "$KILN" bench "$MODEL" --batch >"$DIR/out" 2>"$DIR/err"
    rc=$?
    [ $rc -eq 2 ] && grep -q "option '--batch' needs a value" "$DIR/err" || fail "bench --batch without a value: rc $rc, $(cat "$DIR/err")"
    # --flag=value and options before the model
    "$KILN" run --input="$SRC/examples/tiny_cnn_x.npy" "$MODEL" --output="$DIR/y.npy" >"$DIR/out" 2>&1 ||
        fail "run with --flag=value: $(cat "$DIR/out")"
    "$KILN" compare "$DIR/y.npy" "$SRC/examples/tiny_cnn_expected.npy" --rtol=1e-4 --atol=1e-6 >"$DIR/out" 2>&1 ||
        fail "compare --rtol=: $(cat "$DIR/out")"
    # onnx-test: options after the folders as before them, --quiet (only FAIL lines and the
    # counts), --list-failures=FILE
    NODE=/usr/share/libonnx-testdata/data/node
    [ -d "$NODE/test_relu" ] || fail "no $NODE/test_relu (libonnx-testdata, scripts/deps.sh)"
    {
        "$KILN" onnx-test "$NODE/test_relu" "$DIR/no-such-case" --quiet --list-failures="$DIR/failed.txt" >"$DIR/out" 2>"$DIR/err"
        rc=$?
        [ $rc -eq 1 ] || fail "onnx-test with one failing folder exits $rc, not 1: $(cat "$DIR/out" "$DIR/err")"
        [ "$(cat "$DIR/out")" = "$(printf 'FAIL no-such-case: no model.onnx in it or its subfolders\n1 passed, 1 failed, 0 skipped')" ] ||
            fail "onnx-test --quiet prints: $(cat "$DIR/out")"
        [ "$(cat "$DIR/failed.txt")" = no-such-case ] || fail "onnx-test --list-failures= wrote: $(cat "$DIR/failed.txt")"
        "$KILN" onnx-test --min-pass-rate 0.5 "$NODE/test_relu" "$DIR/no-such-case" >"$DIR/out" 2>&1 ||
            fail "onnx-test --min-pass-rate 0.5 with 1 of 2 passed exits $?: $(cat "$DIR/out")"
    }
    ;;
cache)
    C=$DIR/cache
    mkdir -p "$C"
    printf '# kiln: cuDNN algorithm choices (GPU|cuDNN version|problem|choice); safe to delete\nGPU|90100|fwd a|algo=1 math=1 bytes=0 ms=0.1\nGPU|90100|fwd b|algo=2 math=0 bytes=0 ms=0.2\nGPU|90100|fwd c|algo=0 math=1 bytes=0 ms=0.3\n' >"$C/cudnn-algos.txt"
    size=$(wc -c <"$C/cudnn-algos.txt" | tr -d ' ')
    KILN_CACHE_DIR=$C "$KILN" cache show >"$DIR/out" 2>&1 || fail "cache show exits $?: $(cat "$DIR/out")"
    cat "$DIR/out"
    grep -q "$C/cudnn-algos.txt" "$DIR/out" || fail "cache show does not name the file"
    grep -q "$size bytes, 3 entries" "$DIR/out" || fail "cache show does not give $size bytes, 3 entries"
    KILN_CACHE_DIR=$C "$KILN" cache clear >"$DIR/out" 2>&1 || fail "cache clear exits $?: $(cat "$DIR/out")"
    cat "$DIR/out"
    [ ! -e "$C/cudnn-algos.txt" ] || fail "cache clear left the file"
    grep -q "removed $C/cudnn-algos.txt" "$DIR/out" || fail "cache clear does not say what it removed"
    KILN_CACHE_DIR=$C "$KILN" cache clear >"$DIR/out" 2>&1 || fail "cache clear without a file exits $?"
    grep -q "nothing to remove" "$DIR/out" || fail "cache clear without a file: $(cat "$DIR/out")"
    KILN_CACHE_DIR=$C "$KILN" cache show >"$DIR/out" 2>&1 || fail "cache show without a file exits $?"
    grep -q "no file yet" "$DIR/out" || fail "cache show without a file: $(cat "$DIR/out")"
    ;;
path_once)
    M=$DIR/missing.onnx
    for cmd in "info $M" "bench $M" "run $M --output $DIR/y.npy"; do
        "$KILN" $cmd >"$DIR/out" 2>&1 && fail "kiln $cmd exits 0"
        cat "$DIR/out"
        n=$(grep -o "missing\.onnx" "$DIR/out" | wc -l)
        [ "$n" -eq 1 ] || fail "kiln $cmd names the path $n times: $(cat "$DIR/out")"
    done
    ;;
info_passes)
    "$KILN" info "$MODEL" >"$DIR/out" 2>&1 || fail "info: $(cat "$DIR/out")"
    grep -q "after the passes" "$DIR/out" && fail "plain info shows the passes: $(cat "$DIR/out")"
    grep -q "^ops (8 kinds): Conv 2, Relu 2" "$DIR/out" || fail "info's op counts: $(cat "$DIR/out")"
    "$KILN" info "$MODEL" --device cpu >"$DIR/out" 2>&1 || fail "info --device cpu: $(cat "$DIR/out")"
    grep -q "^after the passes (cpu, fp32): 7 nodes; ops (6 kinds): FusedConv 2," "$DIR/out" ||
        fail "info --device cpu: $(cat "$DIR/out")"
    "$KILN" info "$MODEL" --device cuda --fp16 >"$DIR/out" 2>&1 || fail "info --device cuda --fp16: $(cat "$DIR/out")"
    # (FusedConv where the build has the CUDA backend, whose table the fusions ask; the
    # sanitizer builds have none and keep Conv + Relu)
    grep -q "^after the passes (cuda, fp16): .*Cast 1.*ToNHWC 1" "$DIR/out" ||
        fail "info --device cuda --fp16: $(cat "$DIR/out")"
    "$KILN" info "$MODEL" --device gpu >"$DIR/out" 2>&1
    [ $? -eq 2 ] || fail "info --device gpu does not exit 2: $(cat "$DIR/out")"
    ;;
run_batch)
    X=$SRC/examples/tiny_cnn_x.npy
    "$KILN" run "$MODEL" --input "$X" --output "$DIR/whole.npy" >"$DIR/out" 2>&1 || fail "run: $(cat "$DIR/out")"
    "$KILN" run "$MODEL" --input "$X" --output "$DIR/sliced.npy" --batch 3 --stats >"$DIR/out" 2>&1 ||
        fail "run --batch 3: $(cat "$DIR/out")"
    grep -q "2 slices of up to 3 rows" "$DIR/out" || fail "run --batch 3 --stats does not report 2 slices: $(cat "$DIR/out")"
    grep -q "f32\[4," "$DIR/out" || fail "run --batch 3 does not report 4 rows: $(cat "$DIR/out")"
    python3 - "$DIR/whole.npy" "$DIR/sliced.npy" <<'PY' || fail "run --batch 3 and the unsliced run differ"
import struct, sys
def load(p):
    d = open(p, "rb").read()
    n = struct.unpack("<H", d[8:10])[0]
    head, body = d[10:10 + n].decode(), d[10 + n:]
    return head, struct.unpack("<%df" % (len(body) // 4), body)
(ha, a), (hb, b) = load(sys.argv[1]), load(sys.argv[2])
big = max(abs(v) for v in a)
err = max(abs(x - y) for x, y in zip(a, b))
print(ha.strip(), "|", hb.strip(), "| max abs diff", err)
sys.exit(0 if ha == hb and big > 0 and err <= 1e-5 * big else 1)
PY
    "$KILN" run "$MODEL" --input "$X" --output "$DIR/y.npy" --batch 0 >"$DIR/out" 2>&1
    [ $? -eq 2 ] || fail "run --batch 0 does not exit 2: $(cat "$DIR/out")"
    grep -q -- "--batch" "$DIR/out" || fail "run --batch 0 does not name the option: $(cat "$DIR/out")"
    ;;
trace)
    "$KILN" bench "$MODEL" --batch 2 --iters 3 --warmup 1 --device cpu --trace "$DIR/t.json" >"$DIR/out" 2>&1 ||
        fail "bench --trace: $(cat "$DIR/out")"
    grep -q '"name": "process_name", "ph": "M", "pid": 1, .*"args": {"name": "kiln bench [^"]*tiny_cnn.onnx' "$DIR/t.json" ||
        fail "no process_name metadata event"
    grep -q '"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "[^"]' "$DIR/t.json" ||
        fail "no thread_name metadata event for the nodes' tid 1"
    grep -q '"ph": "X", .*"tid": 1' "$DIR/t.json" || fail "no node events"
    if command -v python3 >/dev/null; then
        python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$DIR/t.json" || fail "the trace is not JSON"
    fi
    ;;
*) fail "unknown case" ;;
esac
echo "PASS $CASE"
