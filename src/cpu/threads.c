/* threads.c — how many threads CPU kernels use, and how OpenMP's idle threads wait.
 *
 * The count is a setting of the running session (or trainer), not of the process: a run
 * sets it for its own thread (kiln_cpu_threads_enter) and puts the old value back after,
 * so sessions in different threads each use their own count. Kernels read it with
 * kiln_cpu_threads() (explicit num_threads clauses); the OpenMP regions without a clause
 * take the calling thread's nthreads ICV, which kiln_cpu_threads_enter sets too (the ICV
 * is per thread in OpenMP's data environment). OpenBLAS runs single-threaded
 * (conv_common's kiln_gemm splits big products over OpenMP threads), so that one pool of
 * threads serves every kernel.
 *
 * Waiting: libgomp's idle threads spin (GOMP_SPINCOUNT 300,000 by default, milliseconds)
 * before they sleep. On a machine whose cores other processes keep busy, those spinning
 * threads take the time slices the working threads need, and a 2-thread run became 10-30x
 * slower than a 1-thread one; OMP_WAIT_POLICY=passive makes them sleep at once. libgomp
 * reads the policy from the environment once, in its initializer, which runs before any
 * code of a program or of a library linked into it (a setenv from the executable's
 * .preinit_array is not seen either: tried, GOMP_SPINCOUNT stayed 300000), and it has no
 * call to change it later. So the policy is the program's: the kiln command line sets it
 * and restarts itself (cli/kiln.c), scripts/test.sh exports it, and kiln.h tells library
 * users.
 */
#include "../core/internal.h"

#include <omp.h>

/* 0: not set by a run on this thread (all cores) */
static _Thread_local int thread_setting;

int kiln_cpu_threads(void) { return thread_setting > 0 ? thread_setting : omp_get_num_procs(); }

kiln_cpu_threads_saved kiln_cpu_threads_enter(int n) {
    const kiln_cpu_threads_saved old = {thread_setting, omp_get_max_threads()};
    thread_setting = n > 0 ? n : 0;
    const int t = kiln_cpu_threads();
    if (t != old.icv) omp_set_num_threads(t);
    return old;
}

void kiln_cpu_threads_leave(kiln_cpu_threads_saved old) {
    thread_setting = old.setting;
    if (omp_get_max_threads() != old.icv) omp_set_num_threads(old.icv);
}
