#!/bin/sh
# dist_resume.sh MPIRUN TEST_DIST DATA WORKDIR: a checkpoint saved mid-epoch by 2 ranks
# (test_dist resume-save) resumes on 3 ranks with batch 20, on 1 with batch 50 and on 2
# with the saving batch (bitwise the uninterrupted run); then rank 1 of 2 lacks the file:
# every rank fails naming it (test_dist resume-bad). See tests/test_dist.c.
mpirun=$1 prog=$2 data=$3 dir=$4
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir" || fail "cannot make $dir"
ck=$dir/ck.safetensors
timeout 60 "$mpirun" -np 2 "$prog" resume-save "$data" "$ck" || fail "2 ranks saving"
for run in "3 20" "1 50" "2 32"; do
    set -- $run
    timeout 60 "$mpirun" -np "$1" "$prog" resume-load "$data" "$ck" "$2" || fail "$1 rank(s) of batch $2 resuming"
done
# a rank without the file: every rank fails, naming it, before any restores anything
out=$(timeout 60 "$mpirun" -np 2 "$prog" resume-bad "$data" "$ck" 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "a rank without the checkpoint"
echo "ok: resumed on 3, 1 and 2 ranks; a rank without the file named"
