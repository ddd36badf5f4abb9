#!/bin/sh
# kiln train's edge cases on a tiny MNIST-format data set written here (1280 training
# images, 40 steps of 32 per epoch; 80 test images):
#   cli_train.sh KILN WORKDIR resume_rate | resume_finished | batch_too_large | max_steps_progress
# resume_rate: after --resume the progress line's steps/s counts only the steps this
#   process ran (rate x epoch seconds = steps run, not the step index reached).
# resume_finished: --resume of a finished run (--epochs 1 --save) says there is nothing
#   left to do and exits non-zero without printing an accuracy; with --epochs 2 it trains
#   and evaluates the second epoch.
# batch_too_large: --batch 10000000 is refused naming both numbers, before any allocation.
# max_steps_progress: under --max-steps 3 the progress counts to step 3 (not the epoch's
#   40), and on a terminal (script(1)) the bar's line ends before the summary lines.
set -u
KILN=$1 DIR=$2 CASE=$3
fail() { echo "FAIL $CASE: $*"; exit 1; }
rm -rf "$DIR" && mkdir -p "$DIR" || fail "cannot make $DIR"
D=$DIR/data
mkdir -p "$D"
idx() { # FILE N IMAGES(0/1): IDX header of N u8 images 28x28 or N labels, then the data
    if [ "$3" = 1 ]; then printf '\000\000\010\003' >"$1"; else printf '\000\000\010\001' >"$1"; fi
    printf "\\$(printf %03o $(($2 / 256 / 256 / 256 % 256)))\\$(printf %03o $(($2 / 256 / 256 % 256)))" >>"$1"
    printf "\\$(printf %03o $(($2 / 256 % 256)))\\$(printf %03o $(($2 % 256)))" >>"$1"
    if [ "$3" = 1 ]; then
        printf '\000\000\000\034\000\000\000\034' >>"$1"
        head -c $(($2 * 784)) /dev/urandom >>"$1"
    else
        i=0
        while [ $i -lt $(($2 / 10)) ]; do printf '\000\001\002\003\004\005\006\007\010\011'; i=$((i + 1)); done >>"$1"
    fi
}
idx "$D/train-images-idx3-ubyte" 1280 1
idx "$D/train-labels-idx1-ubyte" 1280 0
idx "$D/t10k-images-idx3-ubyte" 80 1
idx "$D/t10k-labels-idx1-ubyte" 80 0
CK=$DIR/ck.safetensors
T="$KILN train mnist-net --data $D --batch 32"

case $CASE in
resume_rate)
    $T --max-steps 32 --save "$CK" >"$DIR/a.out" 2>&1 || fail "first run: $(cat "$DIR/a.out")"
    $T --resume "$CK" >"$DIR/b.out" 2>&1 || fail "resumed run: $(cat "$DIR/b.out")"
    cat "$DIR/b.out"
    grep -q "resumed from .* at epoch 1 step 32" "$DIR/b.out" || fail "not resumed at step 32"
    rate=$(grep "step 40/40 " "$DIR/b.out" | sed 's/.*  \([0-9.]*\) steps\/s.*/\1/')
    secs=$(grep "^epoch 1: " "$DIR/b.out" | sed 's/^epoch 1: \([0-9.]*\) s,.*/\1/')
    [ -n "$rate" ] && [ -n "$secs" ] || fail "no rate or epoch time in the output"
    # 8 steps ran here: rate x seconds is about 8; counting the 32 skipped steps gives 40
    awk -v r="$rate" -v s="$secs" 'BEGIN { n = r * s; printf "rate %s steps/s x %s s = %.1f steps (8 ran)\n", r, s, n;
                                           exit !(n > 2.5 && n < 20) }' || fail "the rate does not count the 8 steps run"
    ;;
resume_finished)
    $T --epochs 1 --save "$CK" >"$DIR/a.out" 2>&1 || fail "first run: $(cat "$DIR/a.out")"
    $T --resume "$CK" >"$DIR/b.out" 2>&1
    rc=$?
    cat "$DIR/b.out"
    [ $rc -ne 0 ] || fail "--resume of a finished run exits 0"
    grep -q "nothing left to do: .*ck.safetensors is at the end of epoch 1 of 1; pass --epochs M with M > 1" "$DIR/b.out" ||
        fail "no 'nothing left to do' message"
    ! grep -q "accuracy" "$DIR/b.out" || fail "an accuracy printed with nothing evaluated"
    $T --resume "$CK" --epochs 2 --max-steps 3 --losses "$DIR/losses" >"$DIR/c.out" 2>&1 ||
        fail "--epochs 2: $(cat "$DIR/c.out")"
    cat "$DIR/c.out"
    [ "$(wc -l <"$DIR/losses")" -eq 3 ] || fail "--epochs 2 --max-steps 3 did not train 3 steps"
    grep -q "resumed from .* at epoch 2 step 0" "$DIR/c.out" &&
        grep -q "^epoch 2: .*test accuracy 0\.[0-9]*" "$DIR/c.out" && grep -q "^test accuracy: " "$DIR/c.out" ||
        fail "--epochs 2 did not train and evaluate epoch 2"
    ;;
batch_too_large)
    $T --batch 10000000 >"$DIR/b.out" 2>&1
    rc=$?
    cat "$DIR/b.out"
    [ $rc -ne 0 ] || fail "exit 0"
    grep -q "batch of 10000000 exceeds the data set's 1280 samples" "$DIR/b.out" || fail "the error does not name both numbers"
    ;;
max_steps_progress)
    $T --max-steps 3 >"$DIR/a.out" 2>&1 || fail "run: $(cat "$DIR/a.out")"
    cat "$DIR/a.out"
    grep -q "^epoch 1/1 step 3/3 " "$DIR/a.out" || fail "the progress does not count to step 3 of 3"
    ! grep -q "step [0-9]*/40" "$DIR/a.out" || fail "the progress counts the whole epoch (40 steps)"
    command -v script >/dev/null || fail "script(1) is needed to run kiln on a terminal"
    script -qec "$T --max-steps 3" /dev/null >"$DIR/b.out" 2>&1 </dev/null || fail "run on a terminal: $(cat "$DIR/b.out")"
    cat "$DIR/b.out"
    grep -q "\] 3/3 " "$DIR/b.out" || fail "the bar does not count to 3/3"
    grep -q "^epoch 1: " "$DIR/b.out" || fail "the bar's line is not ended before 'epoch 1: ...'"
    ;;
*) fail "unknown case" ;;
esac
echo "PASS $CASE"
