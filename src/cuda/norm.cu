/*
 * norm.cu — normalization kernels for f32, f16 and bf16.
 *
 *   BatchNormalization, inference (training_mode=0; Y the only output; training mode is
 *   norm_train.cu's):
 *     y = x * a[c] + b[c], a = scale / sqrt(var + epsilon), b = B - mean * a.
 *     A first tiny kernel computes a and b per channel in double from parameters of any
 *     float dtype (f64 included, as opset 15 allows) into 2*C floats of workspace; the
 *     second applies them over X (N, C, D1..Dn), or a 4-D X laid out NHWC.
 *
 *   Softmax / LogSoftmax over the layout the CPU reference uses (src/ops/softmax_common.c):
 *     opset 13+: along `axis` (default -1), the input viewed as (outer, n, inner);
 *     opsets < 13: the input coerced to 2-D at `axis` (default 1), inner = 1.
 *   Rows are shifted by their max (NaN propagates) before exp; sums accumulate in float.
 *   inner == 1 (the usual last-axis case): one block per row with block reductions;
 *   otherwise one thread per (outer, inner) column, whose neighbours read neighbouring
 *   addresses.
 *
 *   kiln.SoftmaxGrad / kiln.LogSoftmaxGrad (Y, dY) -> dX over the same rows (the forward's
 *   axis and opset), in float:
 *     Softmax:    dX = Y * (dY - sum(dY * Y))
 *     LogSoftmax: dX = dY - exp(Y) * sum(dY)
 */
#include "dtype.cuh"
#include "norm_train.h"
#include "reduce.cuh"

#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

/* ---------------------------------------------------------- batch normalization */

struct BnParams {
    const void *scale, *bias, *mean, *var;
    int dt_scale, dt_bias, dt_mean, dt_var;
    double eps;
};

// ab: (2, C): a then b
__global__ void bn_prepare(BnParams p, float *ab, int64_t C) {
    for (int64_t c = thread_index(); c < C; c += grid_stride()) {
        const double a = load_any(p.scale, p.dt_scale, c) / sqrt(load_any(p.var, p.dt_var, c) + p.eps);
        ab[c] = (float)a;
        ab[C + c] = (float)(load_any(p.bias, p.dt_bias, c) - load_any(p.mean, p.dt_mean, c) * a);
    }
}

// x, y: (N, C, S); ab: (2, C)
template <typename T>
__global__ void bn_apply(const T *x, T *y, const float *ab, int64_t n, int64_t C, int64_t S) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        const int64_t c = (i / S) % C;
        y[i] = from_f<T>(to_f(x[i]) * ab[c] + ab[C + c]);
    }
}

template <typename T>
kiln_status launch_bn_apply(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y,
                            const float *ab, int64_t n, int64_t C, int64_t S) {
    bn_apply<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(
        (const T *)x, (T *)y, ab, n, C, S);
    KILN_CUDA_LAUNCHED(ctx, "bn_apply");
    return KILN_OK;
}

size_t bn_workspace(int64_t C) { return ((size_t)(2 * C) * sizeof(float) + 255) & ~(size_t)255; }

/* --------------------------------------------------------------------- softmax */

// x, y: (rows, n)
template <typename T, bool LOG>
__global__ void softmax_rows(const T *x, T *y, int64_t rows, int64_t n) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * n;
        T *yr = y + r * n;
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) mx = nan_max(mx, to_f(xr[j]));
        mx = block_reduce<true>(mx, scratch);
        float sum = 0.f;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += expf(to_f(xr[j]) - mx);
        sum = block_reduce<false>(sum, scratch);
        const float log_sum = logf(sum), inv = 1.f / sum;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            const float v = to_f(xr[j]) - mx; /* first: exact even when mx is huge */
            yr[j] = from_f<T>(LOG ? v - log_sum : expf(v) * inv);
        }
    }
}

// x, y: (outer, n, inner)
template <typename T, bool LOG>
__global__ void softmax_cols(const T *x, T *y, int64_t outer, int64_t n, int64_t inner) {
    for (int64_t t = thread_index(); t < outer * inner; t += grid_stride()) {
        const int64_t base = (t / inner) * n * inner + t % inner;
        float mx = -INFINITY, sum = 0.f;
        for (int64_t k = 0; k < n; k++) mx = nan_max(mx, to_f(x[base + k * inner]));
        for (int64_t k = 0; k < n; k++) sum += expf(to_f(x[base + k * inner]) - mx);
        const float log_sum = logf(sum), inv = 1.f / sum;
        for (int64_t k = 0; k < n; k++) {
            const float v = to_f(x[base + k * inner]) - mx;
            y[base + k * inner] = from_f<T>(LOG ? v - log_sum : expf(v) * inv);
        }
    }
}

template <typename T>
kiln_status launch_softmax(kiln_cuda *cu, kiln_context *ctx, bool log_out, const void *xv,
                           void *yv, int64_t outer, int64_t n, int64_t inner) {
    if (outer * n * inner == 0) return KILN_OK;
    const T *x = (const T *)xv;
    T *y = (T *)yv;
    if (inner == 1) {
        /* a block no wider than the row (rounded up to whole warps) */
        int threads = 32;
        while (threads < THREADS && threads < n) threads *= 2;
        int64_t blocks = outer < 65535 ? outer : 65535;
        if (log_out)
            softmax_rows<T, true><<<(unsigned)blocks, threads, 0, cu->stream>>>(x, y, outer, n);
        else
            softmax_rows<T, false><<<(unsigned)blocks, threads, 0, cu->stream>>>(x, y, outer, n);
        KILN_CUDA_LAUNCHED(ctx, "softmax_rows");
    } else {
        const unsigned blocks = kiln_cuda_blocks(cu, outer * inner, THREADS);
        if (log_out)
            softmax_cols<T, true><<<blocks, THREADS, 0, cu->stream>>>(x, y, outer, n, inner);
        else
            softmax_cols<T, false><<<blocks, THREADS, 0, cu->stream>>>(x, y, outer, n, inner);
        KILN_CUDA_LAUNCHED(ctx, "softmax_cols");
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- softmax grad */

template <bool LOG> __device__ __forceinline__ float sm_grad_term(float y, float dy) {
    return LOG ? dy : dy * y;
}
template <bool LOG> __device__ __forceinline__ float sm_grad_out(float y, float dy, float s) {
    return LOG ? dy - expf(y) * s : y * (dy - s);
}

// y, dy, dx: (rows, n)
template <typename T, bool LOG>
__global__ void softmax_grad_rows(const T *y, const T *dy, T *dx, int64_t rows, int64_t n) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *yr = y + r * n, *gr = dy + r * n;
        T *xr = dx + r * n;
        float s = 0.f;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += sm_grad_term<LOG>(to_f(yr[j]), to_f(gr[j]));
        s = block_reduce<false>(s, scratch);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            xr[j] = from_f<T>(sm_grad_out<LOG>(to_f(yr[j]), to_f(gr[j]), s));
    }
}

// y, dy, dx: (outer, n, inner)
template <typename T, bool LOG>
__global__ void softmax_grad_cols(const T *y, const T *dy, T *dx, int64_t outer, int64_t n, int64_t inner) {
    for (int64_t t = thread_index(); t < outer * inner; t += grid_stride()) {
        const int64_t base = (t / inner) * n * inner + t % inner;
        float s = 0.f;
        for (int64_t k = 0; k < n; k++) s += sm_grad_term<LOG>(to_f(y[base + k * inner]), to_f(dy[base + k * inner]));
        for (int64_t k = 0; k < n; k++) {
            const int64_t i = base + k * inner;
            dx[i] = from_f<T>(sm_grad_out<LOG>(to_f(y[i]), to_f(dy[i]), s));
        }
    }
}

template <typename T>
kiln_status launch_softmax_grad(kiln_cuda *cu, kiln_context *ctx, bool log_out, const void *yv,
                                const void *dyv, void *dxv, int64_t outer, int64_t n, int64_t inner) {
    if (outer * n * inner == 0) return KILN_OK;
    const T *y = (const T *)yv, *dy = (const T *)dyv;
    T *dx = (T *)dxv;
    if (inner == 1) {
        int threads = 32;
        while (threads < THREADS && threads < n) threads *= 2;
        const int64_t blocks = outer < 65535 ? outer : 65535;
        if (log_out)
            softmax_grad_rows<T, true><<<(unsigned)blocks, threads, 0, cu->stream>>>(y, dy, dx, outer, n);
        else
            softmax_grad_rows<T, false><<<(unsigned)blocks, threads, 0, cu->stream>>>(y, dy, dx, outer, n);
        KILN_CUDA_LAUNCHED(ctx, "softmax_grad_rows");
    } else {
        const unsigned blocks = kiln_cuda_blocks(cu, outer * inner, THREADS);
        if (log_out)
            softmax_grad_cols<T, true><<<blocks, THREADS, 0, cu->stream>>>(y, dy, dx, outer, n, inner);
        else
            softmax_grad_cols<T, false><<<blocks, THREADS, 0, cu->stream>>>(y, dy, dx, outer, n, inner);
        KILN_CUDA_LAUNCHED(ctx, "softmax_grad_cols");
    }
    return KILN_OK;
}

/* The rows of Softmax / LogSoftmax and their gradients over x's shape, as
 * src/ops/softmax_common.c lays them out. */
kiln_status softmax_layout(kiln_op_ctx *c, const kiln_tensor *x, int64_t *outer, int64_t *n,
                           int64_t *inner) {
    const bool coerce_2d = c->node->opset < 13;
    int64_t axis = kiln_attr_int(c->node, "axis", coerce_2d ? 1 : -1);
    if (!kiln_norm_axis(&axis, x->ndim))
        return kiln_fail(c->kctx, KILN_ERR_SHAPE, "axis %lld is out of range for rank %d",
                         (long long)axis, x->ndim);
    *outer = *n = *inner = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < axis) *outer *= x->dims[d];
        else if (d == axis || coerce_2d) *n *= x->dims[d];
        else *inner *= x->dims[d];
    }
    return KILN_OK;
}

kiln_status softmax(kiln_cuda *cu, kiln_op_ctx *c, bool log_out) {
    const kiln_tensor *x = c->in[0];
    int64_t outer = 0, n = 0, inner = 0;
    kiln_status st = softmax_layout(c, x, &outer, &n, &inner);
    if (st) return st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_softmax, cu, c->kctx, log_out, x->data,
                           c->out[0]->data, outer, n, inner);
    return st;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" kiln_status kiln_cuda_ws_batchnorm(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    if (kiln_cuda_bn_training(c)) return kiln_cuda_ws_bn_train(cu, c, bytes); /* norm_train.cu */
    *bytes = bn_workspace(c->in[0]->ndim >= 2 ? c->in[0]->dims[1] : 0);
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_batchnorm(kiln_cuda *cu, kiln_op_ctx *c) {
    if (kiln_cuda_bn_training(c)) return kiln_cuda_k_bn_train(cu, c); /* norm_train.cu */
    const kiln_tensor *x = c->in[0]; // (N, C, D1..Dn)
    kiln_tensor *y = c->out[0];
    const int64_t N = x->dims[0], C = x->dims[1];
    int64_t S = 1;
    for (int d = 2; d < x->ndim; d++) S *= x->dims[d];
    if (N * C * S == 0) return KILN_OK;
    if (c->workspace_size < bn_workspace(C) || !c->workspace)
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "BatchNormalization needs %zu bytes of workspace, got %zu",
                         bn_workspace(C), c->workspace_size);
    BnParams p;
    p.scale = c->in[1]->data;
    p.bias = c->in[2]->data;
    p.mean = c->in[3]->data;
    p.var = c->in[4]->data;
    p.dt_scale = c->in[1]->dtype;
    p.dt_bias = c->in[2]->dtype;
    p.dt_mean = c->in[3]->dtype;
    p.dt_var = c->in[4]->dtype;
    p.eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    float *ab = (float *)c->workspace; // (2, C)
    bn_prepare<<<kiln_cuda_blocks(cu, C, THREADS), THREADS, 0, cu->stream>>>(p, ab, C);
    KILN_CUDA_LAUNCHED(c->kctx, "bn_prepare");
    kiln_status st;
    /* NHWC: the channel is the innermost dim, (N*H*W, C) with a stride of 1 */
    const bool nhwc = x->ndim == 4 && x->format == KILN_FORMAT_NHWC;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_bn_apply, cu, c->kctx, x->data, y->data, ab,
                           N * C * S, C, nhwc ? 1 : S);
    return st;
}

extern "C" kiln_status kiln_cuda_k_softmax(kiln_cuda *cu, kiln_op_ctx *c) { return softmax(cu, c, false); }

extern "C" kiln_status kiln_cuda_k_logsoftmax(kiln_cuda *cu, kiln_op_ctx *c) {
    return softmax(cu, c, true);
}

extern "C" kiln_status kiln_cuda_k_softmax_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *y = c->in[0], *dy = c->in[1];
    const bool log_out = strcmp(c->node->op_type, "LogSoftmaxGrad") == 0;
    int64_t outer = 0, n = 0, inner = 0;
    kiln_status st = softmax_layout(c, y, &outer, &n, &inner);
    if (st) return st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, y->dtype, launch_softmax_grad, cu, c->kctx, log_out, y->data, dy->data,
                           c->out[0]->data, outer, n, inner);
    return st;
}
