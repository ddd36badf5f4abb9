/*
 * reduce_grad.cu — kiln.ReduceSumGrad, kiln.ReduceMeanGrad (X, dY, axes?) and
 * kiln.ReduceMaxGrad, kiln.ReduceMinGrad, kiln.ReduceL2Grad (X, dY, Y, axes?) -> dX like X, as
 * src/ops/reduce_common.c computes them, in f32 / f16 / bf16, NCHW:
 *   dY (the forward's output, with or without keepdims) is broadcast back over the
 *   reduced dims: Sum copies it, Mean multiplies it by 1 / the count reduced (in double,
 *   rounded once), Max / Min give it to the elements equal to Y, split evenly among ties,
 *   L2 gives dY / Y * X in double (0 where Y = 0), bit for bit the reference's.
 * The axes are read as the forward read them (the `axes` attribute before opset 13 for
 * Sum, 18 for the others; from then on the axes input, whose values are known when the
 * plan is built; empty axes reduce everything unless noop_with_empty_axes = 1).
 * One thread per element of dX walks its coordinates to dY's offset (the reduced dims'
 * strides 0). Max / Min first count each output's ties: a zeroed int per output in the
 * workspace, integer atomics (exact, so the result does not depend on the order), then
 * dX = [x == y] * dY / ties.
 */
#include "dtype.cuh"
#include "norm_train.h"

#include <stdio.h>
#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

struct Bcast {
    int nd;
    int64_t dims[KILN_MAX_DIMS]; /* X's */
    int64_t ystr[KILN_MAX_DIMS]; /* dY's element stride along each of X's dims; 0 where reduced */
};

__device__ __forceinline__ int64_t y_offset(const Bcast &b, int64_t i) {
    int64_t off = 0;
    for (int d = b.nd - 1; d >= 0; d--) {
        const int64_t q = i / b.dims[d];
        off += (i - q * b.dims[d]) * b.ystr[d];
        i = q;
    }
    return off;
}

// dy: (keepdims shape); dx: like X
template <typename T>
__global__ void sum_grad(const T *dy, T *dx, int64_t n, Bcast b, double scale) {
    for (int64_t i = thread_index(); i < n; i += grid_stride())
        dx[i] = from_f<T>((float)((double)to_f(dy[y_offset(b, i)]) * scale));
}

__global__ void zero_ints(int *p, int64_t n) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) p[i] = 0;
}

// x: like X; y: (keepdims shape); ties: (numel Y)
template <typename T>
__global__ void count_ties(const T *x, const T *y, int *ties, int64_t n, Bcast b) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        const int64_t o = y_offset(b, i);
        if (to_f(x[i]) == to_f(y[o])) atomicAdd(&ties[o], 1);
    }
}

template <typename T>
__global__ void extremum_grad(const T *x, const T *y, const T *dy, const int *ties, T *dx, int64_t n, Bcast b) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        const int64_t o = y_offset(b, i);
        const bool hit = to_f(x[i]) == to_f(y[o]);
        dx[i] = from_f<T>(hit ? (float)((double)to_f(dy[o]) / (double)ties[o]) : 0.f);
    }
}

template <typename T>
__global__ void l2_grad(const T *x, const T *y, const T *dy, T *dx, int64_t n, Bcast b) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        const int64_t o = y_offset(b, i);
        const double yv = (double)to_f(y[o]);
        const double g = yv != 0 ? __dmul_rn(__ddiv_rn((double)to_f(dy[o]), yv), (double)to_f(x[i])) : 0.0;
        dx[i] = from_f<T>((float)g);
    }
}

template <typename T>
kiln_status launch_l2_grad(kiln_cuda *cu, kiln_context *ctx, const void *x, const void *y, const void *dy, void *dx,
                           int64_t n, Bcast b) {
    if (n == 0) return KILN_OK;
    l2_grad<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((const T *)x, (const T *)y,
                                                                             (const T *)dy, (T *)dx, n, b);
    KILN_CUDA_LAUNCHED(ctx, "l2_grad");
    return KILN_OK;
}

template <typename T>
kiln_status launch_reduce_grad(kiln_cuda *cu, kiln_context *ctx, bool extremum, const void *x, const void *y,
                               const void *dy, void *dx, int *ties, int64_t n, int64_t ny, Bcast b, double scale) {
    if (n == 0) return KILN_OK;
    const unsigned blocks = kiln_cuda_blocks(cu, n, THREADS);
    if (!extremum) {
        sum_grad<T><<<blocks, THREADS, 0, cu->stream>>>((const T *)dy, (T *)dx, n, b, scale);
        KILN_CUDA_LAUNCHED(ctx, "sum_grad");
        return KILN_OK;
    }
    zero_ints<<<kiln_cuda_blocks(cu, ny, THREADS), THREADS, 0, cu->stream>>>(ties, ny);
    KILN_CUDA_LAUNCHED(ctx, "zero_ints");
    count_ties<T><<<blocks, THREADS, 0, cu->stream>>>((const T *)x, (const T *)y, ties, n, b);
    KILN_CUDA_LAUNCHED(ctx, "count_ties");
    extremum_grad<T><<<blocks, THREADS, 0, cu->stream>>>((const T *)x, (const T *)y, (const T *)dy, ties, (T *)dx, n,
                                                        b);
    KILN_CUDA_LAUNCHED(ctx, "extremum_grad");
    return KILN_OK;
}

bool extremum_of(const kiln_op_ctx *c) {
    return strcmp(c->node->op_type, "ReduceMaxGrad") == 0 || strcmp(c->node->op_type, "ReduceMinGrad") == 0;
}

bool l2_of(const kiln_op_ctx *c) { return strcmp(c->node->op_type, "ReduceL2Grad") == 0; }

/* Y is input 2 (the axes then input 3) */
bool with_y_of(const kiln_op_ctx *c) { return extremum_of(c) || l2_of(c); }

/* The dims of X the forward reduced (all false: noop_with_empty_axes with empty axes),
 * read from the attribute or the host values of the axes input (hin). */
bool grad_axes(const kiln_op_ctx *c, kiln_tensor *const *hin, bool *reduced, char *why, size_t wn) {
    bool noop = false;
    return kiln_cuda_reduce_axes(c, hin, with_y_of(c) ? 3 : 2, reduced, &noop, why, wn);
}

Bcast bcast_of(const kiln_tensor *x, const bool *reduced) {
    Bcast b;
    memset(&b, 0, sizeof b);
    b.nd = x->ndim;
    int64_t stride = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        b.dims[d] = x->dims[d];
        b.ystr[d] = reduced[d] ? 0 : stride;
        if (!reduced[d]) stride *= x->dims[d];
    }
    return b;
}

} // namespace

extern "C" bool kiln_cuda_sup_reduce_grad(const kiln_op_ctx *c, char *why, size_t n) {
    const bool ext = with_y_of(c);
    const int need = ext ? 3 : 2;
    for (int i = 0; i < need; i++)
        if (i >= c->n_in || !c->in[i]) {
            snprintf(why, n, "input %d is missing", i);
            return false;
        }
    const kiln_tensor *x = c->in[0], *dy = c->in[1];
    if (!kiln_cuda_float_dtype(dy->dtype) || c->out[0]->dtype != dy->dtype ||
        (ext && (x->dtype != dy->dtype || c->in[2]->dtype != dy->dtype))) {
        snprintf(why, n, "dY of dtype %s, X %s, dX %s (one of f32, f16, bf16 for all)", kiln_dtype_name(dy->dtype),
                 kiln_dtype_name(x->dtype), kiln_dtype_name(c->out[0]->dtype));
        return false;
    }
    if (extremum_of(c) && kiln_tensor_numel(dy) > INT32_MAX) {
        snprintf(why, n, "%lld outputs (tie counts are int)", (long long)kiln_tensor_numel(dy));
        return false;
    }
    bool reduced[KILN_MAX_DIMS];
    return grad_axes(c, kiln_cuda_host_inputs(c), reduced, why, n);
}

extern "C" kiln_status kiln_cuda_ws_reduce_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    (void)cu;
    *bytes = extremum_of(c) ? (((size_t)kiln_tensor_numel(c->in[1]) * sizeof(int) + 255) & ~(size_t)255) : 0;
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_reduce_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *dy = c->in[1];
    const bool ext = extremum_of(c);
    bool reduced[KILN_MAX_DIMS];
    char why[200] = "";
    if (!grad_axes(c, c->host_in, reduced, why, sizeof why))
        return c->host_in ? kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "%s", why) : kiln_cuda_need_host(c);
    const int64_t n = kiln_tensor_numel(x), ny = kiln_tensor_numel(dy);
    const size_t ws = ext ? (size_t)ny * sizeof(int) : 0;
    if (ext && ny > 0 && (!c->workspace || c->workspace_size < ws))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "%s needs %zu bytes of workspace, got %zu", c->node->op_type, ws,
                         c->workspace_size);
    kiln_status st;
    if (l2_of(c)) {
        KILN_CU_FLOAT_DISPATCH(st, c->kctx, dy->dtype, launch_l2_grad, cu, c->kctx, x->data, c->in[2]->data, dy->data,
                               c->out[0]->data, n, bcast_of(x, reduced));
        return st;
    }
    const double scale =
        strcmp(c->node->op_type, "ReduceMeanGrad") == 0 && ny > 0 && n > 0 ? (double)ny / (double)n : 1.0;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, dy->dtype, launch_reduce_grad, cu, c->kctx, ext, x->data,
                           ext ? c->in[2]->data : nullptr, dy->data, c->out[0]->data, (int *)c->workspace, n, ny,
                           bcast_of(x, reduced), scale);
    return st;
}
