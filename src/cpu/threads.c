/* threads.c — how many threads CPU kernels use: the OpenMP setting. OpenBLAS runs
 * single-threaded (conv_common's kiln_gemm splits big products over OpenMP threads), so
 * that one pool of threads serves every kernel. */
#include "../core/internal.h"

#include <omp.h>

static int threads_setting;

int kiln_cpu_threads(void) { return threads_setting > 0 ? threads_setting : omp_get_num_procs(); }

void kiln_cpu_set_threads(int n) {
    if (n == threads_setting) return;
    threads_setting = n;
    int t = kiln_cpu_threads();
    omp_set_num_threads(t);
}
