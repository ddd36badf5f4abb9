#!/bin/sh
# kiln train's edge cases on a tiny MNIST-format data set written here (1280 training
# images, 40 steps of 32 per epoch; 80 test images):
#   cli_train.sh KILN WORKDIR resume_rate | resume_finished | batch_too_large | max_steps_progress
#   cli_train.sh KILN WORKDIR resume_ranks MPIRUN
# resume_rate: after --resume the progress line's steps/s counts only the steps this
#   process ran (rate x epoch seconds = steps run, not the step index reached).
# resume_finished: --resume of a finished run (--epochs 1 --save) says there is nothing
#   left to do and exits non-zero without printing an accuracy; with --epochs 2 it trains
#   and evaluates the second epoch.
# batch_too_large: --batch 10000000 is refused naming both numbers, before any allocation.
# max_steps_progress: under --max-steps 3 the progress counts to step 3 (not the epoch's
#   40), and on a terminal (script(1)) the bar's line ends before the summary lines.
# resume_ranks: a checkpoint saved mid-epoch by 2 ranks (mpirun) resumes on 3 ranks and on
#   one process with another --batch: each says where (the sample, the saving ranks and
#   batch, its own step) and trains exactly the steps the epoch's rest makes at its world
#   size and batch; a mid-epoch checkpoint of the latter resumes on 2 ranks again.
set -u
KILN=$1 DIR=$2 CASE=$3 MPIRUN=${4:-mpirun}
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
resume_ranks)
    # 1280 samples, 2 ranks of 32: 20 steps per epoch; 7 steps leave 1280 - 448 = 832
    $MPIRUN -np 2 $T --max-steps 7 --save "$CK" >"$DIR/a.out" 2>&1 || fail "2 ranks: $(cat "$DIR/a.out")"
    # 3 ranks of 32: 14 steps per epoch; the 832 left are 278 per rank (padded), 9 steps
    $MPIRUN -np 3 $T --resume "$CK" --losses "$DIR/l3" >"$DIR/b.out" 2>&1 || fail "3 ranks: $(cat "$DIR/b.out")"
    cat "$DIR/b.out"
    grep -q "saved by 2 rank(s) of batch 32 at sample 448 of epoch 1; this run goes on with 3 rank(s) of batch 32 from step 5 of 14" \
        "$DIR/b.out" || fail "3 ranks: no note of the position"
    grep -q "resumed from .* at epoch 1 step 5" "$DIR/b.out" || fail "3 ranks: not resumed at step 5"
    [ "$(wc -l <"$DIR/l3")" -eq 9 ] || fail "3 ranks trained $(wc -l <"$DIR/l3") steps, not 9"
    # one process of 16: 80 steps per epoch, the 832 left are 52; 10 of them, then a save
    $T --resume "$CK" --batch 16 --max-steps 10 --save "$DIR/ck2.safetensors" --losses "$DIR/l1" >"$DIR/c.out" 2>&1 ||
        fail "one process: $(cat "$DIR/c.out")"
    cat "$DIR/c.out"
    grep -q "this run goes on with 1 rank(s) of batch 16 from step 28 of 80" "$DIR/c.out" || fail "one process: no note"
    [ "$(wc -l <"$DIR/l1")" -eq 10 ] || fail "one process trained $(wc -l <"$DIR/l1") steps, not 10"
    # 448 + 160 = 608 taken; 2 ranks of 32: the 672 left are 11 steps of 20 (4 run here)
    $MPIRUN -np 2 $T --resume "$DIR/ck2.safetensors" --max-steps 4 --losses "$DIR/l2" >"$DIR/d.out" 2>&1 ||
        fail "2 ranks again: $(cat "$DIR/d.out")"
    cat "$DIR/d.out"
    grep -q "saved by 1 rank(s) of batch 16 at sample 608 of epoch 1; this run goes on with 2 rank(s) of batch 32 from step 9 of 20" \
        "$DIR/d.out" || fail "2 ranks again: no note of the position"
    grep -q "resumed from .* at epoch 1 step 9" "$DIR/d.out" || fail "2 ranks again: not resumed at step 9"
    ;;
*) fail "unknown case" ;;
esac
echo "PASS $CASE"
