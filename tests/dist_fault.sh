#!/bin/sh
# dist_fault.sh MPIRUN TEST_DIST hang|kill DATA: 3 ranks, rank 1 hangs or dies at step 3;
# passes when mpirun exits non-zero and the output names what happened: the survivors'
# timed-out all-reduce (hang: rank 0 or 2, whichever mpirun lets print first on a busy
# machine), or mpirun's report of rank 1 (kill).
mpirun=$1 prog=$2 fault=$3 data=$4
out=$(timeout 100 "$mpirun" -np 3 "$prog" "$fault" "$data" 2>&1)
rc=$?
echo "$out"
echo "exit status: $rc"
[ "$rc" -ne 0 ] || { echo "FAIL: exit status 0 although rank 1 stopped"; exit 1; }
[ "$rc" -ne 124 ] || { echo "FAIL: the ranks hung (killed by timeout)"; exit 1; }
case $fault in
hang) echo "$out" | grep -Eq "rank [02] of 3: an all-[a-z]* did not complete within 3 s" ||
        { echo "FAIL: no rank reported the timed-out all-reduce"; exit 1; } ;;
kill) echo "$out" | grep -qi "rank 1" || { echo "FAIL: mpirun did not name rank 1"; exit 1; } ;;
esac
echo "ok: $fault"
