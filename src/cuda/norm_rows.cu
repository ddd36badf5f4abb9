/*
 * norm_rows.cu — normalizations over rows, one block per row, in f32 / f16 / bf16 with the
 * statistics in float (two passes over the row: the mean, then squared deviations), as
 * layernorm.cu does; parameters of any float dtype (f64 included):
 *
 *   kiln.LayerNormGrad(X, Scale, dY?, dMean?, dInvStdDev?) -> dX, dScaleFull?
 *     (src/ops/layer_normalization.c): X as rows (prod(dims[:axis]), D), statistics
 *     recomputed per row; with xhat = (x - mean) * inv and g = dY * Scale, as the reference:
 *       dX = inv * g + cx * xhat + k, cx = -(inv * sum(g * xhat) + dInvStdDev * inv^2) / D,
 *       k = (dMean - inv * sum(g)) / D; dScaleFull = dY * xhat (X's dtype and shape).
 *     Scale: one value, or one per row element (the same for every row), as the forward's
 *     kernel takes it; dMean and dInvStdDev one value per row.
 *   InstanceNormalization(X, scale, B) -> Y (src/ops/instance_normalization.c): each (n, c)
 *     plane of X (N, C, D1..Dn) normalized by its mean and population variance,
 *     y = (x - mean) / sqrt(var + epsilon) * scale[c] + B[c].
 *   kiln.InstanceNormGrad(dY, X, scale, B) -> dX, dScale, dB: per plane of S elements,
 *     dX = scale[c] / std * (dY - sum(dY) / S - xhat * sum(dY * xhat) / S); the plane's
 *     sum(dY * xhat) and sum(dY) go to workspace (2 floats a plane), and a second kernel adds
 *     them over n per channel (in double, in n order: no atomics) into dScale and dB, in
 *     their parameters' dtypes.
 * NCHW only (these ops have no NHWC rule in the layout pass).
 */
#include "dtype.cuh"
#include "norm_train.h"
#include "reduce.cuh"

#include <stdio.h>
#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

__device__ __forceinline__ void store_param(void *p, int dtype, int64_t i, double v) {
    switch (dtype) {
    case KILN_F32: ((float *)p)[i] = (float)v; break;
    case KILN_F64: ((double *)p)[i] = v; break;
    case KILN_F16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case KILN_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    default: break;
    }
}

/* The row's mean and 1 / sqrt(var + eps), in every thread of the block. */
template <typename T>
__device__ __forceinline__ void row_stats(const T *xr, int64_t D, float eps, float *scratch, float *mean, float *inv) {
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s += to_f(xr[j]);
    const float m = block_reduce<false>(s, scratch) / (float)D;
    float q = 0.f;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
        const float d = to_f(xr[j]) - m;
        q += d * d;
    }
    *mean = m;
    *inv = 1.f / sqrtf(block_reduce<false>(q, scratch) / (float)D + eps);
}

int row_threads(int64_t D) {
    int threads = 32;
    while (threads < THREADS && threads < D) threads *= 2;
    return threads;
}

/* ------------------------------------------------------------------ LayerNormGrad */

struct LnGrad {
    const void *scale;
    int dt_scale;
    int64_t step_scale;        /* 1: one per row element; 0: one value */
    const void *dmean, *dinv;  /* (rows) or NULL */
    int dt_dmean, dt_dinv;
    float eps;
};

// x, dy, dx, dfull: (rows, D); dy, dfull may be NULL
template <typename T>
__global__ void layernorm_grad_rows(const T *x, const T *dy, T *dx, T *dfull, int64_t rows, int64_t D, LnGrad p) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * D, *gr = dy ? dy + r * D : nullptr;
        float mean, inv;
        row_stats(xr, D, p.eps, scratch, &mean, &inv);
        float sg = 0.f, sgx = 0.f;
        for (int64_t j = threadIdx.x; gr && j < D; j += blockDim.x) {
            const float g = to_f(gr[j]) * (float)load_any(p.scale, p.dt_scale, j * p.step_scale);
            sg += g;
            sgx += g * (to_f(xr[j]) - mean) * inv;
        }
        sg = block_reduce<false>(sg, scratch);
        sgx = block_reduce<false>(sgx, scratch);
        const float dmean = p.dmean ? (float)load_any(p.dmean, p.dt_dmean, r) : 0.f;
        const float dinv = p.dinv ? (float)load_any(p.dinv, p.dt_dinv, r) : 0.f;
        const float cx = -(inv * sgx + dinv * inv * inv) / (float)D, k = (dmean - inv * sg) / (float)D;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            const float xhat = (to_f(xr[j]) - mean) * inv, g = gr ? to_f(gr[j]) : 0.f;
            const float sc = (float)load_any(p.scale, p.dt_scale, j * p.step_scale);
            dx[r * D + j] = from_f<T>(inv * g * sc + cx * xhat + k);
            if (dfull) dfull[r * D + j] = from_f<T>(g * xhat);
        }
    }
}

template <typename T>
kiln_status launch_ln_grad(kiln_cuda *cu, kiln_context *ctx, const void *x, const void *dy, void *dx, void *dfull,
                           int64_t rows, int64_t D, LnGrad p) {
    if (rows * D == 0) return KILN_OK;
    const unsigned blocks = (unsigned)(rows < 65535 ? rows : 65535);
    layernorm_grad_rows<T><<<blocks, row_threads(D), 0, cu->stream>>>((const T *)x, (const T *)dy, (T *)dx, (T *)dfull,
                                                                     rows, D, p);
    KILN_CUDA_LAUNCHED(ctx, "layernorm_grad_rows");
    return KILN_OK;
}

/* ------------------------------------------------------------ InstanceNormalization */

struct InParams {
    const void *scale, *bias;
    int dt_scale, dt_bias;
    float eps;
};

// x, y: (N*C, S)
template <typename T>
__global__ void instnorm_rows(const T *x, T *y, int64_t planes, int64_t C, int64_t S, InParams p) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < planes; r += gridDim.x) {
        const T *xr = x + r * S;
        float mean, inv;
        row_stats(xr, S, p.eps, scratch, &mean, &inv);
        const int64_t c = r % C;
        const float a = (float)load_any(p.scale, p.dt_scale, c) * inv, b = (float)load_any(p.bias, p.dt_bias, c);
        for (int64_t j = threadIdx.x; j < S; j += blockDim.x) y[r * S + j] = from_f<T>((to_f(xr[j]) - mean) * a + b);
    }
}

// dy, x, dx: (N*C, S); part: (N*C, 2) the plane's sum(dY * xhat), sum(dY)
template <typename T>
__global__ void instnorm_grad_rows(const T *dy, const T *x, T *dx, float *part, int64_t planes, int64_t C, int64_t S,
                                   InParams p) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < planes; r += gridDim.x) {
        const T *xr = x + r * S, *gr = dy + r * S;
        float mean, inv;
        row_stats(xr, S, p.eps, scratch, &mean, &inv);
        float sg = 0.f, sgx = 0.f;
        for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
            const float g = to_f(gr[j]);
            sg += g;
            sgx += g * (to_f(xr[j]) - mean);
        }
        sg = block_reduce<false>(sg, scratch);
        const float sum_dy_xhat = block_reduce<false>(sgx, scratch) * inv;
        const float a = (float)load_any(p.scale, p.dt_scale, r % C) * inv;
        const float b = -a * inv * sum_dy_xhat / (float)S, k = -a * sg / (float)S;
        for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
            dx[r * S + j] = from_f<T>(a * to_f(gr[j]) + b * (to_f(xr[j]) - mean) + k);
        if (threadIdx.x == 0) {
            part[2 * r] = sum_dy_xhat;
            part[2 * r + 1] = sg;
        }
    }
}

// part: (N, C, 2) -> dscale, dbias (C)
__global__ void instnorm_param_grads(const float *part, int64_t N, int64_t C, void *dscale, int dt_scale, void *dbias,
                                     int dt_bias) {
    for (int64_t c = thread_index(); c < C; c += grid_stride()) {
        double s = 0, b = 0;
        for (int64_t n = 0; n < N; n++) {
            s += part[2 * (n * C + c)];
            b += part[2 * (n * C + c) + 1];
        }
        if (dscale) store_param(dscale, dt_scale, c, s);
        if (dbias) store_param(dbias, dt_bias, c, b);
    }
}

template <typename T>
kiln_status launch_instnorm(kiln_cuda *cu, kiln_context *ctx, const void *x, void *y, int64_t N, int64_t C, int64_t S,
                            InParams p) {
    const int64_t planes = N * C;
    if (planes * S == 0) return KILN_OK;
    const unsigned blocks = (unsigned)(planes < 65535 ? planes : 65535);
    instnorm_rows<T><<<blocks, row_threads(S), 0, cu->stream>>>((const T *)x, (T *)y, planes, C, S, p);
    KILN_CUDA_LAUNCHED(ctx, "instnorm_rows");
    return KILN_OK;
}

struct InGradOut {
    void *dscale, *dbias;
    int dt_scale, dt_bias;
};

template <typename T>
kiln_status launch_instnorm_grad(kiln_cuda *cu, kiln_context *ctx, const void *dy, const void *x, void *dx,
                                 float *part, int64_t N, int64_t C, int64_t S, InParams p, InGradOut o) {
    const int64_t planes = N * C;
    if (planes * S == 0) return KILN_OK;
    const unsigned blocks = (unsigned)(planes < 65535 ? planes : 65535);
    instnorm_grad_rows<T><<<blocks, row_threads(S), 0, cu->stream>>>((const T *)dy, (const T *)x, (T *)dx, part,
                                                                    planes, C, S, p);
    KILN_CUDA_LAUNCHED(ctx, "instnorm_grad_rows");
    instnorm_param_grads<<<kiln_cuda_blocks(cu, C, THREADS), THREADS, 0, cu->stream>>>(part, N, C, o.dscale,
                                                                                      o.dt_scale, o.dbias, o.dt_bias);
    KILN_CUDA_LAUNCHED(ctx, "instnorm_param_grads");
    return KILN_OK;
}

/* ------------------------------------------------------------------ host side */

bool present(const kiln_op_ctx *c, int i) { return i < c->n_in && c->in[i] != NULL; }
bool has_out(const kiln_op_ctx *c, int i) { return i < c->n_out && c->out[i] != NULL; }
bool param_dtype(kiln_dtype t) { return kiln_cuda_float_dtype(t) || t == KILN_F64; }

/* (N, C, S) of x */
void planes_of(const kiln_tensor *x, int64_t *N, int64_t *C, int64_t *S) {
    *N = x->dims[0];
    *C = x->dims[1];
    *S = 1;
    for (int d = 2; d < x->ndim; d++) *S *= x->dims[d];
}

/* Row length D of LayerNormalization's X (dims[axis:]); false when axis is out of range. */
bool ln_rows(const kiln_op_ctx *c, const kiln_tensor *x, int64_t *rows, int64_t *D) {
    int64_t axis = kiln_attr_int(c->node, "axis", -1);
    if (!kiln_norm_axis(&axis, x->ndim)) return false;
    *D = 1;
    for (int d = (int)axis; d < x->ndim; d++) *D *= x->dims[d];
    *rows = *D > 0 ? kiln_tensor_numel(x) / *D : 0;
    return true;
}

/* X, scale and B of InstanceNormalization (inputs first..first+2). */
bool in_check(const kiln_op_ctx *c, int first, char *why, size_t n) {
    const kiln_tensor *x = c->in[first];
    if (!kiln_cuda_float_dtype(x->dtype) || x->ndim < 2 || kiln_tensor_numel(x) == 0) {
        snprintf(why, n, "X of dtype %s, rank %d, %lld elements (f32, f16 or bf16 of rank >= 2, not empty)",
                 kiln_dtype_name(x->dtype), x->ndim, (long long)kiln_tensor_numel(x));
        return false;
    }
    for (int i = first + 1; i < first + 3; i++)
        if (!present(c, i) || !param_dtype(c->in[i]->dtype) || kiln_tensor_numel(c->in[i]) != x->dims[1]) {
            snprintf(why, n, "input %d must be a float vector of %lld values", i, (long long)x->dims[1]);
            return false;
        }
    if (c->out[0]->dtype != x->dtype) {
        snprintf(why, n, "output 0 must have X's dtype");
        return false;
    }
    return true;
}

InParams in_params(const kiln_op_ctx *c, int first) {
    InParams p;
    p.scale = c->in[first + 1]->data;
    p.dt_scale = c->in[first + 1]->dtype;
    p.bias = c->in[first + 2]->data;
    p.dt_bias = c->in[first + 2]->dtype;
    p.eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    return p;
}

size_t in_grad_ws(const kiln_tensor *x) {
    return ((size_t)(2 * x->dims[0] * x->dims[1]) * sizeof(float) + 255) & ~(size_t)255;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" bool kiln_cuda_sup_ln_grad(const kiln_op_ctx *c, char *why, size_t n) {
    const kiln_tensor *x = c->in[0];
    if (!kiln_cuda_float_dtype(x->dtype)) {
        snprintf(why, n, "X has dtype %s (f32, f16 and bf16 are supported)", kiln_dtype_name(x->dtype));
        return false;
    }
    int64_t rows, D;
    if (!ln_rows(c, x, &rows, &D)) {
        snprintf(why, n, "axis out of range");
        return false;
    }
    int64_t axis = kiln_attr_int(c->node, "axis", -1);
    kiln_norm_axis(&axis, x->ndim);
    const kiln_tensor *sc = present(c, 1) ? c->in[1] : NULL;
    bool ok = sc && param_dtype(sc->dtype) && (kiln_tensor_numel(sc) == 1 || kiln_tensor_numel(sc) == D);
    for (int d = 0; ok && kiln_tensor_numel(sc) != 1 && d < sc->ndim; d++) {
        const int xd = x->ndim - sc->ndim + d;
        ok = xd < axis ? sc->dims[d] == 1 : sc->dims[d] == x->dims[xd];
    }
    if (!ok) {
        snprintf(why, n, "Scale must be a float tensor with one value per row element, or one value");
        return false;
    }
    if (present(c, 2) && c->in[2]->dtype != x->dtype) {
        snprintf(why, n, "dY must have X's dtype");
        return false;
    }
    for (int i = 3; i < 5; i++)
        if (present(c, i) && (!param_dtype(c->in[i]->dtype) || kiln_tensor_numel(c->in[i]) != rows)) {
            snprintf(why, n, "input %d must be a float tensor of one value per row", i);
            return false;
        }
    for (int k = 0; k < 2; k++)
        if (has_out(c, k) && c->out[k]->dtype != x->dtype) {
            snprintf(why, n, "output %d must have X's dtype", k);
            return false;
        }
    return true;
}

extern "C" kiln_status kiln_cuda_k_ln_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *scale = c->in[1];
    int64_t rows, D;
    if (!ln_rows(c, x, &rows, &D)) return kiln_fail(c->kctx, KILN_ERR_SHAPE, "axis out of range");
    LnGrad p;
    memset(&p, 0, sizeof p);
    p.scale = scale->data;
    p.dt_scale = scale->dtype;
    p.step_scale = kiln_tensor_numel(scale) == 1 ? 0 : 1;
    if (present(c, 3)) {
        p.dmean = c->in[3]->data;
        p.dt_dmean = c->in[3]->dtype;
    }
    if (present(c, 4)) {
        p.dinv = c->in[4]->data;
        p.dt_dinv = c->in[4]->dtype;
    }
    p.eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_ln_grad, cu, c->kctx, x->data,
                           present(c, 2) ? c->in[2]->data : nullptr, c->out[0]->data,
                           has_out(c, 1) ? c->out[1]->data : nullptr, rows, D, p);
    return st;
}

extern "C" bool kiln_cuda_sup_instnorm(const kiln_op_ctx *c, char *why, size_t n) { return in_check(c, 0, why, n); }

extern "C" kiln_status kiln_cuda_k_instnorm(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0]; // (N, C, D1..Dn)
    int64_t N, C, S;
    planes_of(x, &N, &C, &S);
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_instnorm, cu, c->kctx, x->data, c->out[0]->data, N, C, S,
                           in_params(c, 0));
    return st;
}

/* kiln.InstanceNormGrad(dY, X, scale, B) -> dX, dScale, dB */
extern "C" bool kiln_cuda_sup_instnorm_grad(const kiln_op_ctx *c, char *why, size_t n) {
    if (c->n_in < 4 || !present(c, 1)) {
        snprintf(why, n, "inputs dY, X, scale and B are required");
        return false;
    }
    if (!in_check(c, 1, why, n)) return false;
    if (c->in[0]->dtype != c->in[1]->dtype) {
        snprintf(why, n, "dY must have X's dtype");
        return false;
    }
    for (int k = 1; k < c->n_out; k++)
        if (has_out(c, k) && (!param_dtype(c->out[k]->dtype) || kiln_tensor_numel(c->out[k]) != c->in[1]->dims[1])) {
            snprintf(why, n, "output %d must be a float vector of %lld values", k, (long long)c->in[1]->dims[1]);
            return false;
        }
    return true;
}

extern "C" kiln_status kiln_cuda_ws_instnorm_grad(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    (void)cu;
    *bytes = in_grad_ws(c->in[1]);
    return KILN_OK;
}

extern "C" kiln_status kiln_cuda_k_instnorm_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1]; // (N, C, D1..Dn) both
    int64_t N, C, S;
    planes_of(x, &N, &C, &S);
    if (N * C * S > 0 && (!c->workspace || c->workspace_size < in_grad_ws(x)))
        return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "InstanceNormGrad needs %zu bytes of workspace, got %zu",
                         in_grad_ws(x), c->workspace_size);
    InGradOut o;
    memset(&o, 0, sizeof o);
    if (has_out(c, 1)) {
        o.dscale = c->out[1]->data;
        o.dt_scale = c->out[1]->dtype;
    }
    if (has_out(c, 2)) {
        o.dbias = c->out[2]->data;
        o.dt_bias = c->out[2]->dtype;
    }
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, x->dtype, launch_instnorm_grad, cu, c->kctx, dy->data, x->data,
                           c->out[0]->data, (float *)c->workspace, N, C, S, in_params(c, 1), o);
    return st;
}
