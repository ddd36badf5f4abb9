/* iocopy.cu — the copies of a device-IO run (cuda_plan.c, run_on_device): the caller's
 * input into the plan's slot and the plan's output into the caller's tensor, as kernels
 * inside the captured graph. A memcpy node there goes through a copy engine and cost the
 * ResNet-50 batch-1 run about 35 us of GPU time (bench/NOTES.md, v2.1); a kernel node costs
 * what its bytes cost. */
#include "cuda_internal.h"

namespace {

constexpr int THREADS = 256;

__global__ void io_copy_kernel(void *dst, const void *src, size_t bytes) {
    const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x, step = (size_t)gridDim.x * blockDim.x;
    size_t done = 0;
    if (((uintptr_t)dst | (uintptr_t)src) % 16 == 0) {
        const size_t n16 = bytes / 16;
        uint4 *d = (uint4 *)dst;
        const uint4 *s = (const uint4 *)src;
        for (size_t i = tid; i < n16; i += step) d[i] = s[i];
        done = n16 * 16;
    }
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    for (size_t i = done + tid; i < bytes; i += step) d[i] = s[i];
}

} // namespace

extern "C" const void *kiln_cuda_io_copy_fn(void) { return (const void *)io_copy_kernel; }

extern "C" kiln_status kiln_cuda_io_copy(kiln_cuda *cu, void *stream, void *dst, const void *src, size_t bytes) {
    if (!bytes) return KILN_OK;
    const unsigned blocks = kiln_cuda_blocks(cu, (int64_t)((bytes + 15) / 16), THREADS);
    io_copy_kernel<<<blocks, THREADS, 0, (cudaStream_t)stream>>>(dst, src, bytes);
    KILN_CUDA_LAUNCHED(cu->ctx, "io_copy_kernel");
    return KILN_OK;
}
