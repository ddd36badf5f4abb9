/*
 * delay.cu — a one-thread kernel that keeps the stream busy for a given time. The per-node
 * profile (cuda_plan.c) enqueues it before each timed pass: the host then enqueues the
 * whole pass while the GPU waits, so the nodes run back to back and the events around
 * each one measure the GPU's time for it, not the host's time to launch it (cuBLASLt's
 * heuristic, cuDNN's descriptor calls).
 */
#include "cuda_internal.h"

namespace {

__global__ void delay_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(2000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

} // namespace

extern "C" kiln_status kiln_cuda_delay(kiln_cuda *cu, double us) {
    const unsigned long long ns = us > 0 ? (unsigned long long)(us * 1e3) : 0ull;
    delay_kernel<<<1, 1, 0, cu->stream>>>(ns);
    KILN_CUDA_LAUNCHED(cu->ctx, "delay_kernel");
    return KILN_OK;
}
