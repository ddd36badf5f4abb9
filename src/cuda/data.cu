/*
 * data.cu — batches gathered on the device from a data set resident in device memory:
 * the step's position in the epoch's permutation is read from device memory, so the
 * gather is captured into a training step's CUDA graph and each replay takes the next
 * batch with no host involvement.
 */
#include "cuda_internal.h"

/* x (B, sample) and y (B) from images (n, sample) and labels (n) at perm[*pos + b]. */
__global__ void gather_batch_kernel(const float *images, const int64_t *labels, const int64_t *perm,
                                    const int64_t *pos, int64_t n, int64_t sample, float *x, int64_t *y) {
    const int64_t b = blockIdx.y;
    int64_t k = *pos + b;
    if (k >= n) k = n - 1; /* never read past the permutation (a caller bug, not data) */
    const int64_t idx = perm[k];
    const float *src = images + idx * sample;
    float *dst = x + b * sample;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < sample; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
    if (blockIdx.x == 0 && threadIdx.x == 0) y[b] = labels[idx];
}

__global__ void advance_kernel(int64_t *pos, int64_t by) { *pos += by; }

extern "C" kiln_status kiln_cuda_gather_batch(kiln_cuda *cu, const float *images, const int64_t *labels,
                                              const int64_t *perm, const int64_t *pos, int64_t n, int64_t batch,
                                              int64_t sample, float *x, int64_t *y) {
    if (batch <= 0 || sample <= 0) return KILN_OK;
    const unsigned bx = (unsigned)((sample + 255) / 256 < 8 ? (sample + 255) / 256 : 8);
    gather_batch_kernel<<<dim3(bx, (unsigned)batch), 256, 0, cu->stream>>>(images, labels, perm, pos, n, sample, x, y);
    KILN_CUDA_CHECK(cu->ctx, cudaGetLastError());
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_advance(kiln_cuda *cu, int64_t *pos, int64_t by) {
    advance_kernel<<<1, 1, 0, cu->stream>>>(pos, by);
    KILN_CUDA_CHECK(cu->ctx, cudaGetLastError());
    return KILN_OK;
}
