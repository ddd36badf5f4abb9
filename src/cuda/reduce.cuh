/*
 * reduce.cuh — block-wide reductions for kernels that give one block to one row
 * (Softmax, GlobalAveragePool). Every thread of the block must call them, with the same
 * shared scratch of 32 floats; they end with a barrier so the scratch can be reused.
 */
#ifndef KILN_CUDA_REDUCE_CUH
#define KILN_CUDA_REDUCE_CUH

#include <math.h>

namespace kiln_cu {

/* max that lets NaN through from either side, as the CPU reference's
 * `if (v > m || isnan(v)) m = v` does */
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

template <bool MAX> __device__ __forceinline__ float combine(float a, float b) {
    if constexpr (MAX) return nan_max(a, b);
    else return a + b;
}

template <bool MAX> __device__ __forceinline__ float warp_reduce(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = combine<MAX>(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The reduction over the block, returned to every thread. blockDim.x: a multiple of 32,
 * at most 1024. */
template <bool MAX> __device__ float block_reduce(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_reduce<MAX>(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nwarps ? scratch[lane] : (MAX ? -INFINITY : 0.f);
        w = warp_reduce<MAX>(w);
        if (lane == 0) scratch[0] = w;
    }
    __syncthreads();
    const float r = scratch[0];
    __syncthreads();
    return r;
}

} // namespace kiln_cu

#endif /* KILN_CUDA_REDUCE_CUH */
