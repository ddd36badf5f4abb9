/* meminfo.c — a CUDA device's free and total memory (kiln_device_memory, src/train/memory.c). */
#include "../core/internal.h"

#include <cuda_runtime_api.h>

kiln_status kiln_cuda_mem_info(kiln_context *ctx, int device, size_t *free_bytes, size_t *total_bytes);

kiln_status kiln_cuda_mem_info(kiln_context *ctx, int device, size_t *free_bytes, size_t *total_bytes) {
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaMemGetInfo(free_bytes, total_bytes);
    if (e != cudaSuccess)
        return kiln_fail(ctx, KILN_ERR_DEVICE, "CUDA device %d: cannot read its free memory: %s", device,
                         cudaGetErrorString(e));
    return KILN_OK;
}
