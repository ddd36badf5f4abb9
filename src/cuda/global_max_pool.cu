/*
 * global_max_pool.cu — GlobalMaxPool: X (N, C, D1..Dk) -> Y (N, C, 1, ..., 1), the maximum
 * of each (n, c) plane, NaN winning as in src/ops/global_max_pool.c (numpy.max); an empty
 * plane gives -inf. NCHW (the op has no NHWC rule in the layout pass), f32 / f16 / bf16.
 * One warp per plane: a strided pass, then a shuffle reduction.
 */
#include "dtype.cuh"
#include "grad_movegrad.h"

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256; /* 8 warps, 8 planes a block */

__device__ __forceinline__ float pick(float a, float b) { return a != a ? a : b != b ? b : (b > a ? b : a); }

// x: (planes, S); y: (planes)
template <typename T> __global__ void gmp_kernel(const T *x, T *y, int64_t planes, int64_t S) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t p = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; p < planes; p += warps) {
        const T *row = x + p * S;
        float best = -INFINITY;
        for (int64_t i = lane; i < S; i += 32) best = pick(best, to_f(row[i]));
        for (int o = 16; o > 0; o >>= 1) best = pick(best, __shfl_xor_sync(0xffffffffu, best, o));
        if (lane == 0) y[p] = from_f<T>(best);
    }
}

template <typename T>
kiln_status launch_gmp(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t planes, int64_t S) {
    gmp_kernel<T><<<kiln_cuda_blocks(cu, planes * 32, THREADS), THREADS, 0, cu->stream>>>((const T *)x, (T *)y,
                                                                                          planes, S);
    KILN_CUDA_LAUNCHED(ctx, "gmp_kernel");
    return KILN_OK;
}

} // namespace

extern "C" kiln_status kiln_cuda_k_global_max_pool(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    const int64_t planes = x->dims[0] * x->dims[1];
    if (planes == 0) return KILN_OK;
    const int64_t S = kiln_tensor_numel(x) / planes;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_gmp, cu, c->kctx, x->data, c->out[0]->data, planes, S);
    return st;
}
