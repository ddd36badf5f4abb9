/* threads.c — how many threads CPU kernels use: one setting for OpenMP loops and
 * OpenBLAS products, so the two do not oversubscribe the cores together. */
#include "../core/internal.h"

#include <cblas.h>
#include <omp.h>

static int threads_setting;

int kiln_cpu_threads(void) { return threads_setting > 0 ? threads_setting : omp_get_num_procs(); }

void kiln_cpu_set_threads(int n) {
    if (n == threads_setting) return;
    threads_setting = n;
    int t = kiln_cpu_threads();
    omp_set_num_threads(t);
    openblas_set_num_threads(t);
}
