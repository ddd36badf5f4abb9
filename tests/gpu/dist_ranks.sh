#!/bin/sh
# dist_ranks.sh KILN TEST_DIST_GPU [ARGS]: test_dist_gpu on every GPU of this host, one rank
# each (kiln launch), against its plain trainer; exit 77 (skipped) with fewer than 2 GPUs.
# KILN_DIST_TEST_NPROC sets the rank count. NVLink multicast off (NVLS: the device machines'
# rule; NCCL needs no multicast for these sizes).
kiln=$1 td=$2
shift 2
n=${KILN_DIST_TEST_NPROC:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
if [ "${n:-0}" -lt 2 ]; then
  echo "skipped: ${n:-0} GPU(s), data parallelism over NCCL needs 2"
  exit 77
fi
[ "$n" -gt 8 ] && n=8
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
echo "kiln launch --nproc $n -- test_dist_gpu $*"
exec "$kiln" launch --nproc "$n" -- "$td" "$@"
