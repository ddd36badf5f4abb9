/*
 * grad_elementwise.cu — the one-pass gradient ops of broadcasting elementwise ops, as their
 * CPU references compute them (NCHW; each output has the broadcast shape, and autograd's
 * kiln.ReduceSumTo sums it back to its input's shape):
 *
 *   kiln.PowGrad(X, Y, dZ) (attribute wrt): wrt 0: dZ * Y * X^(Y-1), 0 where Y = 0;
 *     wrt 1: dZ * X^Y * log(X), 0 where X = 0 and Y >= 0 (src/ops/pow.c). X and Y of any
 *     float dtype (f64 too) or int32 / int64, dZ and the output f32 / f16 / bf16; computed
 *     in double, as the reference does.
 *   kiln.PReluGrad(X, slope, dY) -> (dX, dSlope), X's shape: dX = X < 0 ? slope * dY : dY,
 *     dSlope = X < 0 ? X * dY : 0 (src/ops/prelu.c).
 *   kiln.MinGrad / kiln.MaxGrad(dY, Y, X_0..X_k) (attribute index = k): dY where X_k is
 *     the selected value (X_k == Y, or both NaN) and no earlier X_j is, else 0: ties go to
 *     the first input (src/ops/binary.c's kiln_select_grad_forward).
 *   And two forward ops of the same shape: PRelu(X, slope) = X < 0 ? slope * X : X (a 1-D
 *     per-channel slope before opset 7) and Mean(X_0..X_n-1) = their sum / n, f32 sums.
 * Every input is read through its broadcast strides over the output's dims (up to
 * MAX_IN inputs); one thread per output element in a grid-stride loop. PowGrad, MinGrad
 * and MaxGrad follow their binary forward ops into NHWC (the layout pass's binary rule):
 * an NHWC output is walked in its physical order, every operand NHWC or with the same
 * bytes in both layouts.
 */
#include "dtype.cuh"
#include "grad_movegrad.h"

#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;
constexpr int MAX_IN = 18; /* MinGrad / MaxGrad: dY, Y and up to 16 inputs */

struct Operands {
    int nd, nin;
    int64_t dims[KILN_MAX_DIMS];         /* output dims */
    int64_t st[MAX_IN][KILN_MAX_DIMS];   /* element strides of each input (0: broadcast) */
    const void *p[MAX_IN];
    int dt[MAX_IN];                      /* kiln_dtype of each input */
};

__device__ __forceinline__ double ld(const void *p, int dt, int64_t i) {
    switch (dt) {
    case KILN_F32: return ((const float *)p)[i];
    case KILN_F64: return ((const double *)p)[i];
    case KILN_F16: return __half2float(((const __half *)p)[i]);
    case KILN_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case KILN_I32: return (double)((const int32_t *)p)[i];
    case KILN_I64: return (double)((const int64_t *)p)[i];
    default: return 0;
    }
}

/* The offsets of output element e in inputs 0..nin-1. */
__device__ __forceinline__ void offsets(const Operands &a, int64_t e, int64_t *off) {
    for (int k = 0; k < a.nin; k++) off[k] = 0;
    int64_t r = e;
    for (int d = a.nd - 1; d >= 0; d--) {
        const int64_t j = r % a.dims[d];
        r /= a.dims[d];
        for (int k = 0; k < a.nin; k++) off[k] += j * a.st[k][d];
    }
}

enum Kind { K_POW_X, K_POW_Y, K_PRELU, K_SELECT, K_PRELU_FWD, K_MEAN };

template <typename T> __global__ void grad_kernel(Operands a, int kind, int sel, T *y0, T *y1, int64_t n) {
    for (int64_t e = thread_index(); e < n; e += grid_stride()) {
        int64_t off[MAX_IN];
        offsets(a, e, off);
        if (kind == K_POW_X || kind == K_POW_Y) { /* X, Y, dZ */
            const double x = ld(a.p[0], a.dt[0], off[0]), p = ld(a.p[1], a.dt[1], off[1]);
            const double dz = ld(a.p[2], a.dt[2], off[2]);
            const double g = kind == K_POW_X ? (p == 0 ? 0 : dz * p * pow(x, p - 1))
                                             : ((x == 0 && p >= 0) ? 0 : dz * pow(x, p) * log(x));
            y0[e] = from_f<T>((float)g);
        } else if (kind == K_PRELU) { /* X, slope, dY */
            const double x = ld(a.p[0], a.dt[0], off[0]), s = ld(a.p[1], a.dt[1], off[1]);
            const double d = ld(a.p[2], a.dt[2], off[2]);
            y0[e] = from_f<T>((float)(x < 0 ? s * d : d));
            y1[e] = from_f<T>((float)(x < 0 ? x * d : 0.0));
        } else if (kind == K_PRELU_FWD) { /* X, slope */
            const float x = (float)ld(a.p[0], a.dt[0], off[0]);
            y0[e] = from_f<T>(x < 0 ? x * (float)ld(a.p[1], a.dt[1], off[1]) : x);
        } else if (kind == K_MEAN) { /* X_0..X_n-1, summed left to right, then divided */
            float s = 0.f;
            for (int k = 0; k < a.nin; k++) s += (float)ld(a.p[k], a.dt[k], off[k]);
            y0[e] = from_f<T>(s / (float)a.nin);
        } else { /* dY, Y, X_0..X_sel */
            const double yv = ld(a.p[1], a.dt[1], off[1]);
            bool taken = false;
            for (int j = 0; j < sel && !taken; j++) {
                const double xv = ld(a.p[2 + j], a.dt[2 + j], off[2 + j]);
                taken = xv == yv || (xv != xv && yv != yv);
            }
            const double xv = ld(a.p[2 + sel], a.dt[2 + sel], off[2 + sel]);
            const bool mine = !taken && (xv == yv || (xv != xv && yv != yv));
            y0[e] = mine ? from_f<T>((float)ld(a.p[0], a.dt[0], off[0])) : from_f<T>(0.f);
        }
    }
}

template <typename T>
kiln_status launch_grad(kiln_cuda *cu, kiln_context *ctx, const Operands &a, int kind, int sel, void *y0, void *y1,
                        int64_t n) {
    grad_kernel<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>(a, kind, sel, (T *)y0, (T *)y1, n);
    KILN_CUDA_LAUNCHED(ctx, "grad_kernel");
    return KILN_OK;
}

bool nhwc4(const kiln_tensor *t) { return t->ndim == 4 && t->format == KILN_FORMAT_NHWC; }

/* Inputs first..first+nin-1 of c broadcast over y's dims. An NHWC y is walked in its
 * physical order (N, H, W, C): each input's strides over y's logical dims (an NHWC input's
 * from its own physical layout; any other is NCHW, or has the same bytes in both: table.c
 * checks) are permuted the same way. */
kiln_status operands(kiln_op_ctx *c, int first, int nin, const kiln_tensor *y, Operands *a) {
    memset(a, 0, sizeof *a);
    if (nin > MAX_IN) return kiln_fail(c->kctx, KILN_ERR_UNSUPPORTED, "%d inputs (at most %d)", nin, MAX_IN);
    const bool phys = nhwc4(y);
    static const int perm[4] = {0, 2, 3, 1}; /* physical position -> logical dim */
    a->nd = y->ndim;
    a->nin = nin;
    for (int d = 0; d < y->ndim; d++) a->dims[d] = y->dims[phys ? perm[d] : d];
    for (int k = 0; k < nin; k++) {
        const kiln_tensor *t = c->in[first + k];
        if (!t) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "input %d is missing", first + k);
        int64_t st[KILN_MAX_DIMS];
        if (nhwc4(t)) { /* (n, c, h, w) at ((n*H + h)*W + w)*C + c; 0 where broadcast */
            const int64_t C = t->dims[1], H = t->dims[2], W = t->dims[3];
            const int64_t full[4] = {H * W * C, 1, W * C, C};
            for (int d = 0; d < 4; d++) st[d] = t->dims[d] == 1 && y->dims[d] != 1 ? 0 : full[d];
        } else {
            kiln_broadcast_strides(t->ndim, t->dims, y->ndim, y->dims, st);
        }
        for (int d = 0; d < y->ndim; d++) a->st[k][d] = st[phys ? perm[d] : d];
        a->p[k] = t->data;
        a->dt[k] = (int)t->dtype;
    }
    return KILN_OK;
}

kiln_status run(kiln_cuda *cu, kiln_op_ctx *c, const Operands &a, int kind, int sel) {
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(y);
    if (n == 0) return KILN_OK;
    void *y1 = c->n_out > 1 && c->out[1] ? c->out[1]->data : NULL;
    if (kind == K_PRELU && !y1) return kiln_fail(c->kctx, KILN_ERR_INTERNAL, "output dSlope is missing");
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, y->dtype, launch_grad, cu, c->kctx, a, kind, sel, y->data, y1, n);
    return st;
}

} // namespace

extern "C" kiln_status kiln_cuda_k_pow_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    Operands a;
    kiln_status st = operands(c, 0, 3, c->out[0], &a);
    if (st) return st;
    return run(cu, c, a, kiln_attr_int(c->node, "wrt", 0) == 1 ? K_POW_Y : K_POW_X, 0);
}

extern "C" kiln_status kiln_cuda_k_prelu_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    Operands a;
    kiln_status st = operands(c, 0, 3, c->out[0], &a);
    if (st) return st;
    return run(cu, c, a, K_PRELU, 0);
}

/* PRelu(X, slope): slope broadcast to X's shape; before opset 7 a 1-D slope of X's channel
 * count is one slope per channel (src/ops/prelu.c's legacy_slope). */
extern "C" kiln_status kiln_cuda_k_prelu(kiln_cuda *cu, kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *s = c->in[1];
    kiln_tensor view = *s;
    kiln_tensor *in[2] = {c->in[0], &view};
    kiln_op_ctx lc = *c;
    if (c->node->opset < 7 && s->ndim == 1 && x->ndim >= 3 && s->dims[0] == x->dims[1] && s->dims[0] != 1) {
        view.owns_data = false;
        view.ndim = x->ndim - 1; /* (C, 1, ..., 1) */
        for (int d = 1; d < view.ndim; d++) view.dims[d] = 1;
        lc.in = in;
    }
    Operands a;
    kiln_status st = operands(&lc, 0, 2, c->out[0], &a);
    if (st) return st;
    return run(cu, c, a, K_PRELU_FWD, 0);
}

/* Mean(X_0, ..., X_n-1) with numpy broadcasting, n <= 18. */
extern "C" kiln_status kiln_cuda_k_mean(kiln_cuda *cu, kiln_op_ctx *c) {
    Operands a;
    kiln_status st = operands(c, 0, c->n_in, c->out[0], &a);
    if (st) return st;
    return run(cu, c, a, K_MEAN, 0);
}

extern "C" kiln_status kiln_cuda_k_select_grad(kiln_cuda *cu, kiln_op_ctx *c) {
    const int64_t k = kiln_attr_int(c->node, "index", -1);
    if (k < 0 || k + 2 >= c->n_in)
        return kiln_fail(c->kctx, KILN_ERR_INVALID_ARGUMENT, "attribute index = %lld names no input", (long long)k);
    Operands a;
    kiln_status st = operands(c, 0, (int)k + 3, c->out[0], &a);
    if (st) return st;
    return run(cu, c, a, K_SELECT, (int)k);
}

/* ------------------------------------------------------------ per-channel bias */

namespace {

// y: (N, C, HW) or, nhwc, (N, HW, C); b: (C)
template <typename T> __global__ void bias_kernel(T *y, const T *b, int64_t n, int64_t C, int64_t HW, bool nhwc) {
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        const int64_t ch = nhwc ? i % C : (i / HW) % C;
        y[i] = from_f<T>(to_f(y[i]) + to_f(b[ch]));
    }
}

template <typename T>
kiln_status launch_bias(kiln_cuda *cu, kiln_context *ctx, void *y, const void *b, int64_t n, int64_t C, int64_t HW,
                        bool nhwc) {
    bias_kernel<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((T *)y, (const T *)b, n, C, HW, nhwc);
    KILN_CUDA_LAUNCHED(ctx, "bias_kernel");
    return KILN_OK;
}

} // namespace

extern "C" kiln_status kiln_cuda_channel_bias_add(kiln_cuda *cu, kiln_context *ctx, kiln_dtype dt, void *y,
                                                  const void *b, int64_t N, int64_t C, int64_t HW, bool nhwc) {
    const int64_t n = N * C * HW;
    if (n == 0) return KILN_OK;
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, ctx, dt, launch_bias, cu, ctx, y, b, n, C, HW, nhwc);
    return st;
}
