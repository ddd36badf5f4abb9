/*
 * conv.c — Conv (opsets 11..21): Y = conv(X, W) + B.
 *   X (N, C, D1..Dk), W (M, C/group, K1..Kk), optional B (M)  ->  Y (N, M, O1..Ok), k = 1..3.
 *   Attributes: kernel_shape (optional, must match W), strides, dilations, pads, auto_pad
 *   (NOTSET, SAME_UPPER, SAME_LOWER, VALID), group (grouped and depthwise convolutions).
 *   Dtypes: f32 and f64 through cblas_sgemm / cblas_dgemm; f16 and bf16 are converted to
 *   f32 in the workspace, computed there and rounded back.
 * Method: for each image n and group g, im2col of X[n, g] into the workspace, then
 *   Y[n, g] (Mg, O) = W[g] (Mg, Cg*K) @ col (Cg*K, O), with Y pre-filled by the bias.
 *   1x1 kernels with unit strides and no pads use X[n, g] as col directly. The (n, g) jobs
 *   run side by side with OpenMP, each thread with its own col buffer, unless a few big
 *   products are better split one after the other (conv_common's img2grid and
 *   kiln_gemm_job_threads).
 * Gradient (internal ops in domain "kiln", same attributes, same threading policy):
 *   ConvGradInput(dY, W, X) -> dX: col2im(W[g]^T @ dY[n, g]) per image and group;
 *   ConvGradWeight(X, dY, W) -> dW: sum over n of dY[n, g] @ im2col(X[n, g])^T, the batch
 *   accumulated by the gemm (per-thread partial sums when products run side by side);
 *   ConvGradBias(dY) -> dB: dY summed over all dims but 1 (also ConvTranspose's).
 *   ConvGradWeight's kiln input 3, P (f32 (2, C)), and attribute prologue_relu: X read as
 *   X' = act(a * X + k) (kiln_conv_prologue_in, conv_common.h; the conv-bn-prologue pass,
 *   src/passes/conv_bn_prologue.c, FUSED.md), in f32, padded with zeros after it.
 *   X and W are read for their shapes only where their values are not needed.
 */
#include "../core/optest.h"
#include "conv_common.h"

#include <stdio.h>
#include <string.h>

typedef struct conv_shape {
    kiln_conv_geom g; /* img: X, grid: Y, ci = C/group, cg = M/group */
    int64_t N, C, M, G, Cg, Mg;
} conv_shape;

/* Validate X, W, B (B may be NULL) and the attributes and compute the geometry. Used by
 * infer, workspace sizing and forward of Conv and of its gradient ops, so all agree. */
static kiln_status conv_shape_get(kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *w,
                                  const kiln_tensor *b, conv_shape *s) {
    char xs[128], ws[128];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "X dtype %s is not supported (float dtypes only)", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, w->dtype == x->dtype && (!b || b->dtype == x->dtype), KILN_ERR_TYPE,
                  "W and B must have X's dtype %s", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 3, KILN_ERR_SHAPE,
                  "X must have rank >= 3 (N, C, spatial...), got rank %d", x->ndim);
    KILN_OP_CHECK(c, w->ndim == x->ndim, KILN_ERR_SHAPE,
                  "W %s must have X's rank %d (M, C/group, kernel...)",
                  kiln_shape_str(w, ws, sizeof ws), x->ndim);
    s->N = x->dims[0];
    s->C = x->dims[1];
    s->M = w->dims[0];
    s->G = kiln_attr_int(c->node, "group", 1);
    KILN_OP_CHECK(c, s->G >= 1, KILN_ERR_SHAPE, "attribute group = %lld must be >= 1",
                  (long long)s->G);
    KILN_OP_CHECK(c, s->C % s->G == 0, KILN_ERR_SHAPE,
                  "group = %lld does not divide X's %lld channels", (long long)s->G,
                  (long long)s->C);
    KILN_OP_CHECK(c, w->dims[1] * s->G == s->C, KILN_ERR_SHAPE,
                  "channel mismatch: X %s has %lld channels but W %s expects %lld "
                  "(W dim 1 = %lld per group, group = %lld)",
                  kiln_shape_str(x, xs, sizeof xs), (long long)s->C,
                  kiln_shape_str(w, ws, sizeof ws), (long long)(w->dims[1] * s->G),
                  (long long)w->dims[1], (long long)s->G);
    KILN_OP_CHECK(c, s->M % s->G == 0, KILN_ERR_SHAPE,
                  "group = %lld does not divide W's %lld output channels", (long long)s->G,
                  (long long)s->M);
    KILN_OP_CHECK(c, !b || (b->ndim == 1 && b->dims[0] == s->M), KILN_ERR_SHAPE,
                  "B must have shape (%lld), one value per output channel", (long long)s->M);
    kiln_status st = kiln_window_forward(c, x, w->dims + 2, false, &s->g.w);
    if (st != KILN_OK) return st;
    s->Cg = s->C / s->G;
    s->Mg = s->M / s->G;
    s->g.N = s->N;
    s->g.G = s->G;
    s->g.ci = s->Cg;
    s->g.cg = s->Mg;
    kiln_conv_geom_finish(&s->g);
    KILN_OP_CHECK(c, kiln_blas_fits(s->Mg) && kiln_blas_fits(s->g.grid_n) &&
                         kiln_blas_fits(s->Cg * s->g.K),
                  KILN_ERR_UNSUPPORTED, "products of (%lld, %lld, %lld) exceed the BLAS int range",
                  (long long)s->Mg, (long long)s->g.grid_n, (long long)(s->Cg * s->g.K));
    return KILN_OK;
}

/* Y's dims (N, M, O1..Ok) for the geometry. */
static void y_dims(const conv_shape *s, int64_t *dims) {
    dims[0] = s->N;
    dims[1] = s->M;
    for (int i = 0; i < s->g.w.nd; i++) dims[2 + i] = s->g.w.grid[KILN_WIN_SLOT(&s->g.w, i)];
}

static kiln_status infer(kiln_op_ctx *c) {
    conv_shape s;
    kiln_status st = conv_shape_get(c, c->in[0], c->in[1], c->n_in > 2 ? c->in[2] : NULL, &s);
    if (st != KILN_OK) return st;
    int64_t dims[KILN_MAX_DIMS];
    y_dims(&s, dims);
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, c->in[0]->ndim, dims);
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) {
    kiln_op_ctx tmp = *c;
    conv_shape s;
    const kiln_tensor *b = c->n_in > 2 ? c->in[2] : NULL;
    if (conv_shape_get(&tmp, c->in[0], c->in[1], b, &s) != KILN_OK) return 0;
    size_t stage = kiln_stage_size(c->in[0]) + kiln_stage_size(c->in[1]) + kiln_stage_size(b) +
                   kiln_stage_size(c->out[0]);
    return stage + kiln_conv_workspace(KILN_CONV_IMG2GRID, c->in[0]->dtype == KILN_F64, &s.g);
}

static size_t ws_left(const kiln_op_ctx *c, const char *ws) {
    return c->workspace_size - (size_t)(ws - (char *)c->workspace);
}

/* ------------------------------------------------------------------ prologue */

kiln_status kiln_conv_prologue_check(kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *p, int k) {
    char ps[128];
    KILN_OP_CHECK(c, x->ndim >= 2, KILN_ERR_SHAPE, "a prologue (input %d) needs X of rank >= 2", k);
    KILN_OP_CHECK(c, p->dtype == KILN_F32 && p->ndim == 2 && p->dims[0] == 2 && p->dims[1] == x->dims[1],
                  KILN_ERR_SHAPE,
                  "input %d (the prologue's per-channel a; k) must be f32 (2, C) = (2, %lld) for X's channels, got %s %s",
                  k, (long long)x->dims[1], kiln_dtype_name(p->dtype), kiln_shape_str(p, ps, sizeof ps));
    const int64_t relu = kiln_attr_int(c->node, "prologue_relu", 0);
    KILN_OP_CHECK(c, relu == 0 || relu == 1, KILN_ERR_INVALID_ARGUMENT, "attribute prologue_relu must be 0 or 1, got %lld",
                  (long long)relu);
    return KILN_OK;
}

size_t kiln_conv_prologue_size(const kiln_tensor *x) {
    return kiln_align64((size_t)kiln_tensor_numel(x) * (x->dtype == KILN_F64 ? sizeof(double) : sizeof(float)));
}

/* X' = act(a * x + k) per channel, for f32 / f16 / bf16 X the product exact in double, the sum
 * rounded to double and then to f32 (within f32 rounding of a fused multiply-add, what CUDA's
 * fallback computes; cuDNN's MUL then ADD round twice in f32); in double for f64 X */
const void *kiln_conv_prologue_in(const kiln_tensor *x, const kiln_tensor *p, bool relu, char **ws) {
    const int64_t n = kiln_tensor_numel(x), N = x->dims[0], C = x->dims[1];
    const int64_t S = N * C > 0 ? n / (N * C) : 0;
    const float *a = p->data, *k = a + C;
    void *dst = *ws;
    *ws += kiln_conv_prologue_size(x);
    #pragma omp parallel for if (n > (1 << 15)) schedule(static)
    for (int64_t nc = 0; nc < N * C; nc++) {
        const int64_t ch = nc % C, base = nc * S;
        if (x->dtype == KILN_F64) {
            double *d = (double *)dst + base;
            const double *xs = (const double *)x->data + base;
            for (int64_t i = 0; i < S; i++) {
                const double v = xs[i] * a[ch] + k[ch];
                d[i] = relu ? (v > 0 ? v : 0.0) : v;
            }
        } else {
            float *d = (float *)dst + base;
            for (int64_t i = 0; i < S; i++) {
                const double xv = x->dtype == KILN_F32 ? ((const float *)x->data)[base + i] : kiln_get_f64(x, base + i);
                const float v = (float)(xv * a[ch] + k[ch]);
                d[i] = relu ? (v > 0 ? v : 0.f) : v;
            }
        }
    }
    return dst;
}

static kiln_status forward(kiln_op_ctx *c) { return kiln_conv_forward_prologue(c, NULL, false); }

kiln_status kiln_conv_forward_prologue(kiln_op_ctx *c, const kiln_tensor *p, bool relu) {
    conv_shape s;
    const kiln_tensor *b = c->n_in > 2 ? c->in[2] : NULL;
    kiln_status st = conv_shape_get(c, c->in[0], c->in[1], b, &s);
    if (st != KILN_OK) return st;
    char *ws = c->workspace;
    const void *X = p ? kiln_conv_prologue_in(c->in[0], p, relu, &ws) : kiln_stage_in(c->in[0], &ws); // (N, C, I)
    const void *W = kiln_stage_in(c->in[1], &ws);  // (M, Cg, K)
    const void *B = kiln_stage_in(b, &ws);         // (M) or NULL
    void *Y = kiln_stage_out(c->out[0], &ws);      // (N, M, O)
    if (!kiln_conv_img2grid(c->in[0]->dtype == KILN_F64, &s.g, W, X, B, Y, ws, ws_left(c, ws)))
        return kiln_op_fail(c, KILN_ERR_INTERNAL, "workspace of %zu bytes is too small",
                            c->workspace_size);
    kiln_stage_finish(c->out[0], Y);
    return KILN_OK;
}

/* ------------------------------------------------------------------ gradient */

/* dL/dX = kiln.ConvGradInput(dY, W, X), dL/dW = kiln.ConvGradWeight(X, dY, W), dL/dB =
 * kiln.ConvGradBias(dY); the grad ops carry Conv's attributes and read only the shape of
 * their last input. */
static kiln_status grad(kiln_grad_ctx *g) {
    const int x = KILN_GRAD_IN(g, 0), w = KILN_GRAD_IN(g, 1), dy = g->dy[0];
    if (g->need[0]) {
        g->dx[0] = kiln_grad_emit(g, "kiln", "ConvGradInput", 3, (int[]){dy, w, x}, 1, NULL,
                                  true, NULL);
        if (g->dx[0] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    if (g->need[1]) {
        g->dx[1] = kiln_grad_emit(g, "kiln", "ConvGradWeight", 3, (int[]){x, dy, w}, 1, NULL,
                                  true, NULL);
        if (g->dx[1] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    if (KILN_GRAD_NODE(g)->n_in > 2 && g->need[2]) {
        g->dx[2] = kiln_grad_emit(g, "kiln", "ConvGradBias", 1, &dy, 1, NULL, false, NULL);
        if (g->dx[2] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

/* The geometry of a grad op from X and W (whichever are inputs), checking that dY has the
 * shape and dtype Conv gives Y. */
static kiln_status grad_shape_get(kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *w,
                                  const kiln_tensor *dy, conv_shape *s) {
    kiln_status st = conv_shape_get(c, x, w, NULL, s);
    if (st != KILN_OK) return st;
    int64_t dims[KILN_MAX_DIMS];
    y_dims(s, dims);
    KILN_OP_CHECK(c, dy->dtype == x->dtype, KILN_ERR_TYPE, "dY must have X's dtype %s",
                  kiln_dtype_name(x->dtype));
    bool same = dy->ndim == x->ndim;
    for (int i = 0; same && i < dy->ndim; i++) same = dy->dims[i] == dims[i];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY must have Conv's output shape");
    return KILN_OK;
}

/* kiln.ConvGradInput(dY, W, X) -> dX: col2im(W^T @ dY) per image and group. */
static kiln_status gi_infer(kiln_op_ctx *c) {
    conv_shape s;
    kiln_status st = grad_shape_get(c, c->in[2], c->in[1], c->in[0], &s);
    if (st != KILN_OK) return st;
    kiln_tensor_set_shape(c->out[0], c->in[2]->dtype, c->in[2]->ndim, c->in[2]->dims);
    return KILN_OK;
}

static size_t gi_workspace(const kiln_op_ctx *c) {
    kiln_op_ctx tmp = *c;
    conv_shape s;
    if (grad_shape_get(&tmp, c->in[2], c->in[1], c->in[0], &s) != KILN_OK) return 0;
    size_t stage = kiln_stage_size(c->in[0]) + kiln_stage_size(c->in[1]) +
                   kiln_stage_size(c->out[0]);
    return stage + kiln_conv_workspace(KILN_CONV_GRID2IMG, c->in[0]->dtype == KILN_F64, &s.g);
}

static kiln_status gi_forward(kiln_op_ctx *c) {
    conv_shape s;
    kiln_status st = grad_shape_get(c, c->in[2], c->in[1], c->in[0], &s);
    if (st != KILN_OK) return st;
    char *ws = c->workspace;
    const void *dY = kiln_stage_in(c->in[0], &ws);  // (N, M, O)
    const void *W = kiln_stage_in(c->in[1], &ws);   // (M, Cg, K)
    void *dX = kiln_stage_out(c->out[0], &ws);      // (N, C, I)
    if (!kiln_conv_grid2img(c->in[0]->dtype == KILN_F64, &s.g, W, dY, NULL, dX, ws,
                            ws_left(c, ws)))
        return kiln_op_fail(c, KILN_ERR_INTERNAL, "workspace of %zu bytes is too small",
                            c->workspace_size);
    kiln_stage_finish(c->out[0], dX);
    return KILN_OK;
}

/* kiln.ConvGradWeight(X, dY, W) -> dW: sum over images of dY @ im2col(X)^T per group. */
/* kiln's input 3 of ConvGradWeight: the prologue P (kiln_conv_prologue_in), X read as X' */
static const kiln_tensor *gw_prologue(const kiln_op_ctx *c) { return c->n_in > 3 ? c->in[3] : NULL; }

static kiln_status gw_infer(kiln_op_ctx *c) {
    conv_shape s;
    kiln_status st = grad_shape_get(c, c->in[0], c->in[2], c->in[1], &s);
    if (st != KILN_OK) return st;
    if (gw_prologue(c) && (st = kiln_conv_prologue_check(c, c->in[0], gw_prologue(c), 3))) return st;
    kiln_tensor_set_shape(c->out[0], c->in[2]->dtype, c->in[2]->ndim, c->in[2]->dims);
    return KILN_OK;
}

static size_t gw_workspace(const kiln_op_ctx *c) {
    kiln_op_ctx tmp = *c;
    conv_shape s;
    if (grad_shape_get(&tmp, c->in[0], c->in[2], c->in[1], &s) != KILN_OK) return 0;
    size_t stage = (gw_prologue(c) ? kiln_conv_prologue_size(c->in[0]) : kiln_stage_size(c->in[0])) +
                   kiln_stage_size(c->in[1]) + kiln_stage_size(c->out[0]);
    return stage + kiln_conv_workspace(KILN_CONV_WGRAD, c->in[0]->dtype == KILN_F64, &s.g);
}

static kiln_status gw_forward(kiln_op_ctx *c) {
    conv_shape s;
    kiln_status st = grad_shape_get(c, c->in[0], c->in[2], c->in[1], &s);
    if (st != KILN_OK) return st;
    char *ws = c->workspace;
    const kiln_tensor *p = gw_prologue(c);
    const void *X = p ? kiln_conv_prologue_in(c->in[0], p, kiln_attr_int(c->node, "prologue_relu", 0) != 0, &ws)
                      : kiln_stage_in(c->in[0], &ws); // (N, C, I)
    const void *dY = kiln_stage_in(c->in[1], &ws);  // (N, M, O)
    void *dW = kiln_stage_out(c->out[0], &ws);      // (M, Cg, K)
    if (!kiln_conv_weight_grad(c->in[0]->dtype == KILN_F64, &s.g, dY, X, dW, ws,
                               ws_left(c, ws)))
        return kiln_op_fail(c, KILN_ERR_INTERNAL, "workspace of %zu bytes is too small",
                            c->workspace_size);
    kiln_stage_finish(c->out[0], dW);
    return KILN_OK;
}

/* kiln.ConvGradBias(dY) -> dB (M): dY (N, M, spatial...) summed over all dims but 1, in
 * double. Also the bias gradient of ConvTranspose. */
static kiln_status gb_infer(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(dy->dtype), KILN_ERR_TYPE,
                  "dY dtype %s is not supported (float dtypes only)", kiln_dtype_name(dy->dtype));
    KILN_OP_CHECK(c, dy->ndim >= 2, KILN_ERR_SHAPE, "dY must have rank >= 2 (N, M, ...)");
    kiln_tensor_set_shape(c->out[0], dy->dtype, 1, &dy->dims[1]);
    return KILN_OK;
}

static kiln_status gb_forward(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0];
    const int64_t N = dy->dims[0], M = dy->dims[1];
    const int64_t O = N > 0 && M > 0 ? kiln_tensor_numel(dy) / (N * M) : 0;
#pragma omp parallel for schedule(static) if (N * M * O > 65536)
    for (int64_t m = 0; m < M; m++) {
        /* four running sums, so the f32 loop need not wait on one double add per element */
        double sum[4] = {0, 0, 0, 0};
        for (int64_t n = 0; n < N; n++) {
            const int64_t base = (n * M + m) * O;
            if (dy->dtype == KILN_F32) {
                const float *p = (const float *)dy->data + base;
                int64_t o = 0;
                for (; o + 4 <= O; o += 4)
                    for (int k = 0; k < 4; k++) sum[k] += p[o + k];
                for (; o < O; o++) sum[0] += p[o];
            } else if (dy->dtype == KILN_F64) {
                for (int64_t o = 0; o < O; o++) sum[o & 3] += ((const double *)dy->data)[base + o];
            } else {
                for (int64_t o = 0; o < O; o++) sum[o & 3] += kiln_get_f64(dy, base + o);
            }
        }
        kiln_set_f64(c->out[0], m, (sum[0] + sum[1]) + (sum[2] + sum[3]));
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------- tests */

/* A random case: spatial values for the nd real dims only (s, d default to 1 when 0). */
typedef struct rand_conv {
    int nd;
    int64_t N, C, M, G;
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3];
    bool bias;
} rand_conv;

#ifdef KILN_OPTESTS
/* The oracle for the BLAS paths: a direct loop over outputs, input channels and kernel
 * taps in double. x (N,C,in...), w (M,C/G,k...), b (M) or NULL. Computes y (when non-NULL)
 * and, from dy (when non-NULL), dx and dw (zeroed tensors shaped like x and w). */
static void oracle(const rand_conv *p, const int64_t *out, const kiln_tensor *x,
                   const kiln_tensor *w, const kiln_tensor *b, kiln_tensor *y,
                   const kiln_tensor *dy, kiln_tensor *dx, kiln_tensor *dw) {
    const int nd = p->nd;
    int64_t O = 1, K = 1;
    for (int i = 0; i < nd; i++) {
        O *= out[i];
        K *= p->k[i];
    }
    const int64_t Cg = p->C / p->G, Mg = p->M / p->G;
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t m = 0; m < p->M; m++)
            for (int64_t o = 0; o < O; o++) {
                const int64_t yi = (n * p->M + m) * O + o;
                double acc = b ? kiln_get_f64(b, m) : 0, g = dy ? kiln_get_f64(dy, yi) : 0;
                for (int64_t cc = 0; cc < Cg; cc++)
                    for (int64_t kk = 0; kk < K; kk++) {
                        /* Unravel o and kk over the nd dims (last fastest). */
                        int64_t xi = n * p->C + m / Mg * Cg + cc, wi = m * Cg + cc;
                        int64_t orest = o, krest = kk;
                        int64_t pos[3], tap[3];
                        for (int i = nd - 1; i >= 0; i--) {
                            pos[i] = orest % out[i];
                            orest /= out[i];
                            tap[i] = krest % p->k[i];
                            krest /= p->k[i];
                        }
                        bool inside = true;
                        for (int i = 0; i < nd; i++) {
                            int64_t at = pos[i] * (p->s[i] ? p->s[i] : 1) - p->pb[i] +
                                         tap[i] * (p->d[i] ? p->d[i] : 1);
                            inside = inside && at >= 0 && at < p->in[i];
                            xi = xi * p->in[i] + at;
                            wi = wi * p->k[i] + tap[i];
                        }
                        if (!inside) continue;
                        const double xv = kiln_get_f64(x, xi), wv = kiln_get_f64(w, wi);
                        acc += xv * wv;
                        if (dx) kiln_set_f64(dx, xi, kiln_get_f64(dx, xi) + g * wv);
                        if (dw) kiln_set_f64(dw, wi, kiln_get_f64(dw, wi) + g * xv);
                    }
                if (y) kiln_set_f64(y, yi, acc);
            }
}

/* Attribute text, X / W / Y dims and the kernel size of a random case. */
static void case_setup(const rand_conv *p, char *attrs, size_t size, int64_t *xd, int64_t *wd,
                       int64_t *yd, int64_t *K) {
    const int nd = p->nd;
    snprintf(attrs, size, "group=%lld", (long long)p->G);
    kiln_attr_text_ints(attrs, size, "strides", nd, p->s, NULL, 1);
    kiln_attr_text_ints(attrs, size, "dilations", nd, p->d, NULL, 1);
    kiln_attr_text_ints(attrs, size, "pads", nd, p->pb, p->pe, 0);
    xd[0] = yd[0] = p->N;
    xd[1] = p->C;
    wd[0] = yd[1] = p->M;
    wd[1] = p->C / p->G;
    *K = p->C / p->G;
    for (int i = 0; i < nd; i++) {
        int64_t s = p->s[i] ? p->s[i] : 1, d = p->d[i] ? p->d[i] : 1;
        yd[2 + i] = (p->in[i] + p->pb[i] + p->pe[i] - ((p->k[i] - 1) * d + 1)) / s + 1;
        xd[2 + i] = p->in[i];
        wd[2 + i] = p->k[i];
        *K *= p->k[i];
    }
}

static int random_case(const char *label, const rand_conv *p, uint64_t seed) {
    const int nd = p->nd;
    char attrs[256];
    int64_t xd[5], wd[5], yd[5], K;
    case_setup(p, attrs, sizeof attrs, xd, wd, yd, &K);
    kiln_tensor *in[3] = {kt_rand(KILN_F32, 2 + nd, xd, -1, 1, seed),
                          kt_rand(KILN_F32, 2 + nd, wd, -1, 1, seed + 1),
                          p->bias ? kt_rand(KILN_F32, 1, KT_DIMS(p->M), -1, 1, seed + 2)
                                  : NULL};
    kiln_tensor *want = kt_make(KILN_F32, 2 + nd, yd, NULL);
    if (want) oracle(p, yd + 2, in[0], in[1], in[2], want, NULL, NULL, NULL);
    /* f32 sums of K products of values in [-1, 1): error grows like sqrt(K) ulps. */
    return kiln_optest("Conv", attrs, 3, in, 1, &want, 1e-6 * (double)K, 1e-5, label);
}

kiln_tensor *kt_conv_prologue_ref(const kiln_tensor *x, const kiln_tensor *p, bool relu) {
    const kiln_dtype dt = x->dtype == KILN_F64 ? KILN_F64 : KILN_F32;
    kiln_tensor *r = kt_make(dt, x->ndim, x->dims, NULL);
    if (!r) return NULL;
    const int64_t n = kiln_tensor_numel(x), C = x->dims[1], S = n / (x->dims[0] * C);
    for (int64_t i = 0; i < n; i++) {
        const int64_t ch = i / S % C;
        double v = kiln_get_f64(x, i) * kiln_get_f64(p, ch) + kiln_get_f64(p, C + ch);
        if (dt == KILN_F32) v = (float)v;
        kiln_set_f64(r, i, relu && !(v > 0) ? 0.0 : v);
    }
    return r;
}

/* ConvGradWeight with the prologue P (kiln's input 3) against the oracle on X' =
 * act(a * X + k) in f32 (kt_conv_prologue_ref): X, dY of dtype dt, pads so that the zero
 * padding of X' (not act(k)) is checked, k > 0 in some channels. */
static int prologue_grad_case(const char *label, const rand_conv *p, kiln_dtype dt, bool relu, uint64_t seed) {
    const int nd = p->nd;
    char attrs[320];
    int64_t xd[5], wd[5], yd[5], K;
    case_setup(p, attrs, 256, xd, wd, yd, &K);
    if (relu) snprintf(attrs + strlen(attrs), sizeof attrs - strlen(attrs), "%sprologue_relu=1", attrs[0] ? ";" : "");
    kiln_tensor *x = kt_rand(dt, 2 + nd, xd, -1, 1, seed);
    kiln_tensor *w = kt_rand(dt, 2 + nd, wd, -1, 1, seed + 1);
    kiln_tensor *dy = kt_rand(dt, 2 + nd, yd, -1, 1, seed + 2);
    kiln_tensor *pr = kt_rand(KILN_F32, 2, KT_DIMS(2, p->C), -1, 1.5, seed + 3);
    kiln_tensor *xp = x && pr ? kt_conv_prologue_ref(x, pr, relu) : NULL;
    kiln_tensor *want = kt_make(dt, 2 + nd, wd, NULL);
    if (xp && w && dy && want) oracle(p, yd + 2, xp, w, NULL, NULL, dy, NULL, want);
    kiln_tensor_free(xp);
    const double terms = (double)kiln_tensor_numel(dy) / (double)p->M;
    const double tol = dt == KILN_F32 ? 1e-6 * terms : dt == KILN_F64 ? 1e-12 * terms : 2e-3 * terms;
    return kiln_optest("ConvGradWeight", attrs, 4, (kiln_tensor *[]){x, dy, w, pr}, 1, &want, tol,
                       dt == KILN_F32 ? 1e-5 : dt == KILN_F64 ? 1e-12 : 4e-3, label);
}

/* ConvGradInput (which 0) or ConvGradWeight (which 1) in f32 against the oracle. */
static int random_grad_case(const char *label, const rand_conv *p, int which, uint64_t seed) {
    const int nd = p->nd;
    char attrs[256];
    int64_t xd[5], wd[5], yd[5], K;
    case_setup(p, attrs, sizeof attrs, xd, wd, yd, &K);
    kiln_tensor *x = kt_rand(KILN_F32, 2 + nd, xd, -1, 1, seed);
    kiln_tensor *w = kt_rand(KILN_F32, 2 + nd, wd, -1, 1, seed + 1);
    kiln_tensor *dy = kt_rand(KILN_F32, 2 + nd, yd, -1, 1, seed + 2);
    kiln_tensor *want = which ? kt_make(KILN_F32, 2 + nd, wd, NULL)
                              : kt_make(KILN_F32, 2 + nd, xd, NULL);
    if (x && w && dy && want)
        oracle(p, yd + 2, x, w, NULL, NULL, dy, which ? NULL : want, which ? want : NULL);
    /* dX sums up to M/G*K products, dW N*O of them */
    double terms = which ? (double)kiln_tensor_numel(dy) / (double)p->M
                         : (double)(p->M / p->G * K / (p->C / p->G));
    if (which)
        return kiln_optest("ConvGradWeight", attrs, 3, (kiln_tensor *[]){x, dy, w}, 1, &want,
                           1e-6 * terms, 1e-5, label);
    return kiln_optest("ConvGradInput", attrs, 3, (kiln_tensor *[]){dy, w, x}, 1, &want,
                       1e-6 * terms, 1e-5, label);
}

/* Finite-difference check of Conv's gradient rule (f64) on a random case. */
static int gradcheck_case(const char *label, const rand_conv *p, const char *extra,
                          uint64_t seed) {
    const int nd = p->nd;
    char attrs[300];
    int64_t xd[5], wd[5], yd[5], K;
    case_setup(p, attrs, sizeof attrs, xd, wd, yd, &K);
    if (extra) {
        /* auto_pad cases: the explicit pads are dropped (they may not be combined) */
        snprintf(attrs, sizeof attrs, "group=%lld;%s", (long long)p->G, extra);
        kiln_attr_text_ints(attrs, sizeof attrs, "strides", nd, p->s, NULL, 1);
    }
    kiln_tensor *in[3] = {kt_rand(KILN_F64, 2 + nd, xd, -1, 1, seed),
                          kt_rand(KILN_F64, 2 + nd, wd, -1, 1, seed + 1),
                          p->bias ? kt_rand(KILN_F64, 1, KT_DIMS(p->M), -1, 1, seed + 2)
                                  : NULL};
    return kiln_gradcheck("Conv", attrs, 0, 3, in, NULL, label);
}

static int test(void) {
    int fails = 0;
    /* Fixed cases. Expected values computed once with numpy (window sums over the
     * zero-padded input), cross-checked with onnx.reference where it handles the case. */
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 2, 4, 5), KT_VALS(3, 1, 1, 3, 1, 2, 2, -2, -3, -1,
                -2, 3, 3, -3, 0, 2, -3, 2, -3, 0, 2, -1, -1, -2, 2, -2, 3, 0, 0, 0, 1, 0, 0,
                3, 2, 2, 1, 1, -1, 3)),
            kt_make(KILN_F32, 4, KT_DIMS(3, 2, 3, 2), KT_VALS(0, -1, 2, -2, 2, 1, -2, -2, 0, -2,
                -2, 0, 2, 0, 2, 2, 2, 1, 0, 0, -1, 0, -1, -1, 2, -2, -2, -2, 2, 1, 2, -1, 1,
                -1, 0, -2)),
            kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 1)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 3, 2, 5), KT_VALS(13, -4, -8, 1, 1, -1, -7, 6, -9,
                -5, 12, 9, 2, 4, 0, 10, -3, 4, -18, -5, -2, -5, -11, -13, -1, 8, 7, -11, -2,
                1)),
        };
        fails += kiln_optest("Conv", "strides=[2,1];pads=[1,0,0,2];dilations=[1,2]", 3, in, 1,
                             want, 0, 0, "conv 2-D strides pads dilations bias");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 2, 6), KT_VALS(-2, 0, -2, 3, 3, -2, 0, 3, 2, 1, 1,
                -3)),
            kt_make(KILN_F32, 3, KT_DIMS(2, 1, 3), KT_VALS(1, 0, -2, -1, 0, 1)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 2, 3), KT_VALS(2, -8, 3, 2, -1, -1)),
        };
        fails += kiln_optest("Conv", "strides=[2];auto_pad=SAME_UPPER;group=2", 2, in, 1, want, 0,
                             0, "conv 1-D depthwise SAME_UPPER");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 2, 6), KT_VALS(-2, 0, -2, 3, 3, -2, 0, 3, 2, 1, 1,
                -3)),
            kt_make(KILN_F32, 3, KT_DIMS(2, 1, 3), KT_VALS(1, 0, -2, -1, 0, 1)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 2, 3), KT_VALS(0, -6, 7, 3, -2, -4)),
        };
        fails += kiln_optest("Conv", "strides=[2];auto_pad=SAME_LOWER;group=2", 2, in, 1, want, 0,
                             0, "conv 1-D depthwise SAME_LOWER");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F64, 4, KT_DIMS(1, 1, 5, 4), KT_VALS(0.743, -0.277, 0.196, -0.881,
                -0.225, -0.354, -0.7, 0.633, -0.241, 0.957, 0.18, 0.21, 0.276, 0.353,
                -0.698, -0.119, -0.521, -0.195, -0.807, 0.936)),
            kt_make(KILN_F64, 4, KT_DIMS(2, 1, 2, 3), KT_VALS(-0.57, 0.344, -0.399, 0.748,
                0.324, -0.737, 0.69, 0.89, 0.808, 0.139, -0.709, -0.615)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F64, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(-0.364098, -0.38128, 1.230004,
                -0.441765, 1.074719, -0.670739, 1.048237, 1.607344)),
        };
        fails += kiln_optest("Conv", "strides=[2,1];auto_pad=VALID", 2, in, 1, want, 1e-12, 0,
                             "conv VALID f64");
    }
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F16, 4, KT_DIMS(1, 2, 3, 3), KT_VALS(0, 2, 3, -2, 0, -3, -2, -1, 3, 3,
                1, 1, 0, -3, -1, 3, -1, -2)),
            kt_make(KILN_F16, 4, KT_DIMS(2, 2, 2, 2), KT_VALS(-1, 1, -2, 2, 2, 0, 0, 1, 0, 0,
                -1, 0, 1, -2, -2, 1)),
            kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(-1, 2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F16, 4, KT_DIMS(1, 2, 4, 4), KT_VALS(2, 4, 2, -7, -5, 8, -5, 4, -4, 2,
                -4, -6, -3, 6, 1, -8, 5, -3, -1, -3, -4, 2, 6, 8, 5, 3, 2, 2, -4, 7, 5, 0)),
        };
        fails += kiln_optest("Conv", "pads=[1,1,1,1]", 3, in, 1, want, 0, 0, "conv f16");
    }
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_BF16, 4, KT_DIMS(1, 2, 3, 3), KT_VALS(0, 2, 3, -2, 0, -3, -2, -1, 3, 3,
                1, 1, 0, -3, -1, 3, -1, -2)),
            kt_make(KILN_BF16, 4, KT_DIMS(2, 2, 2, 2), KT_VALS(-1, 1, -2, 2, 2, 0, 0, 1, 0, 0,
                -1, 0, 1, -2, -2, 1)),
            kt_make(KILN_BF16, 1, KT_DIMS(2), KT_VALS(-1, 2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_BF16, 4, KT_DIMS(1, 2, 4, 4), KT_VALS(2, 4, 2, -7, -5, 8, -5, 4, -4, 2,
                -4, -6, -3, 6, 1, -8, 5, -3, -1, -3, -4, 2, 6, 8, 5, 3, 2, 2, -4, 7, 5, 0)),
        };
        fails += kiln_optest("Conv", "pads=[1,1,1,1];kernel_shape=[2,2]", 3, in, 1, want, 0, 0,
                             "conv bf16 kernel_shape");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 5, KT_DIMS(1, 1, 3, 3, 3), KT_VALS(-3, 3, -3, -1, 3, -3, 1, 2, -1,
                -3, 0, 0, 3, 1, -1, -3, 1, -2, 1, 3, -1, 3, 0, 0, 2, 2, 3)),
            kt_make(KILN_F32, 5, KT_DIMS(2, 1, 2, 2, 2), KT_VALS(2, -2, 0, 2, -1, -2, 0, 1, 1,
                2, 1, -2, 2, 0, 2, 2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 5, KT_DIMS(1, 2, 2, 2, 2), KT_VALS(-2, 5, -8, 9, -11, -3, 5, 3,
                -2, 6, 4, 1, 6, 9, 14, 14)),
        };
        fails += kiln_optest("Conv", "", 2, in, 1, want, 0, 0, "conv 3-D");
    }
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F32, 4, KT_DIMS(2, 4, 2, 2), KT_VALS(3, -3, 3, 1, 0, 2, 3, 0, -3, 2,
                -2, -2, -2, -2, 3, -1, -3, -2, -1, -1, -1, 3, 3, 1, 3, -1, -3, -2, -3, 3,
                -2, 0)),
            kt_make(KILN_F32, 4, KT_DIMS(4, 2, 1, 1), KT_VALS(-1, 2, -2, 0, 2, 0, 2, 2)),
            kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(1, 1, 0, 0)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(2, 4, 2, 2), KT_VALS(-2, 8, 4, 0, -5, 7, -5, -1, -6, 4,
                -4, -4, -10, 0, 2, -6, 2, 9, 8, 4, 7, 5, 3, 3, 6, -2, -6, -4, 0, 4, -10,
                -4)),
        };
        fails += kiln_optest("Conv", "group=2", 3, in, 1, want, 0, 0, "conv 1x1 group 2 batch 2");
    }

    /* BLAS path against the direct loop on random inputs. */
    fails += random_case("conv random 2-D grouped, strides, dilations, pads",
                         &(rand_conv){.nd = 2, .N = 2, .C = 6, .M = 4, .G = 2, .in = {9, 11},
                                      .k = {3, 2}, .s = {2, 1}, .d = {1, 2}, .pb = {1, 0},
                                      .pe = {2, 1}, .bias = true},
                         11);
    fails += random_case("conv random depthwise",
                         &(rand_conv){.nd = 2, .N = 2, .C = 8, .M = 8, .G = 8, .in = {12, 10},
                                      .k = {3, 3}, .pb = {1, 1}, .pe = {1, 1}, .bias = true},
                         21);
    /* Three big products: on two threads they run in turn, each split by kiln_gemm. */
    fails += random_case("conv random large",
                         &(rand_conv){.nd = 2, .N = 3, .C = 16, .M = 32, .G = 1, .in = {32, 32},
                                      .k = {3, 3}, .pb = {1, 1}, .pe = {1, 1}},
                         31);
    fails += random_case("conv random 1x1 (no im2col)",
                         &(rand_conv){.nd = 2, .N = 3, .C = 5, .M = 7, .G = 1, .in = {6, 7},
                                      .k = {1, 1}, .bias = true},
                         41);
    fails += random_case("conv random 1-D",
                         &(rand_conv){.nd = 1, .N = 2, .C = 4, .M = 6, .G = 2, .in = {17},
                                      .k = {4}, .s = {3}, .d = {2}, .pb = {3}, .pe = {1},
                                      .bias = true},
                         51);
    fails += random_case("conv random 3-D",
                         &(rand_conv){.nd = 3, .N = 1, .C = 2, .M = 3, .G = 1, .in = {5, 6, 4},
                                      .k = {2, 3, 2}, .s = {2, 1, 1}, .d = {1, 2, 1},
                                      .pb = {1, 0, 1}, .bias = true},
                         61);

    /* Gradient rule against finite differences: every input, assorted geometries. */
    fails += gradcheck_case("conv grad 2-D grouped, strides, dilations, asymmetric pads, bias",
                            &(rand_conv){.nd = 2, .N = 2, .C = 4, .M = 4, .G = 2, .in = {5, 6},
                                         .k = {3, 2}, .s = {2, 1}, .d = {1, 2}, .pb = {1, 0},
                                         .pe = {0, 1}, .bias = true},
                            NULL, 71);
    fails += gradcheck_case("conv grad 1-D strides, dilations, pads, no bias",
                            &(rand_conv){.nd = 1, .N = 2, .C = 3, .M = 2, .G = 1, .in = {11},
                                         .k = {3}, .s = {2}, .d = {2}, .pb = {2}, .pe = {1}},
                            NULL, 72);
    fails += gradcheck_case("conv grad depthwise 3x3 pads 1, bias",
                            &(rand_conv){.nd = 2, .N = 2, .C = 3, .M = 3, .G = 3, .in = {5, 4},
                                         .k = {3, 3}, .pb = {1, 1}, .pe = {1, 1}, .bias = true},
                            NULL, 73);
    fails += gradcheck_case("conv grad depthwise multiplier 2 (M = 2C), strides 2",
                            &(rand_conv){.nd = 2, .N = 1, .C = 2, .M = 4, .G = 2, .in = {6, 5},
                                         .k = {2, 2}, .s = {2, 2}, .bias = true},
                            NULL, 74);
    fails += gradcheck_case("conv grad SAME_UPPER strides 2",
                            &(rand_conv){.nd = 2, .N = 1, .C = 2, .M = 3, .G = 1, .in = {5, 6},
                                         .k = {3, 2}, .s = {2, 2}, .bias = true},
                            "auto_pad=SAME_UPPER", 75);
    fails += gradcheck_case("conv grad SAME_LOWER 1-D",
                            &(rand_conv){.nd = 1, .N = 2, .C = 2, .M = 2, .G = 1, .in = {7},
                                         .k = {4}, .s = {2}},
                            "auto_pad=SAME_LOWER", 76);
    fails += gradcheck_case("conv grad 1x1 (no im2col), bias",
                            &(rand_conv){.nd = 2, .N = 2, .C = 3, .M = 2, .G = 1, .in = {3, 4},
                                         .k = {1, 1}, .bias = true},
                            NULL, 77);
    fails += gradcheck_case("conv grad 3-D",
                            &(rand_conv){.nd = 3, .N = 1, .C = 2, .M = 2, .G = 1, .in = {3, 4, 3},
                                         .k = {2, 2, 2}, .s = {1, 2, 1}, .pb = {1, 0, 0},
                                         .pe = {0, 1, 1}, .bias = true},
                            NULL, 78);
    fails += gradcheck_case("conv grad stride larger than kernel (skipped pixels)",
                            &(rand_conv){.nd = 2, .N = 1, .C = 2, .M = 2, .G = 1, .in = {7, 7},
                                         .k = {2, 2}, .s = {3, 3}},
                            NULL, 79);

    /* errors */
    kiln_tensor *in[3];
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(4, 2, 3, 3), NULL);
    fails += kiln_optest_fails("Conv", "", 2, in, 1, KILN_ERR_SHAPE, "conv channel mismatch");
    /* a dilation whose kernel extent (3 - 1) * d + 1 overflowed int64 (undefined) */
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(4, 3, 3, 3), NULL);
    fails += kiln_optest_fails("Conv", "dilations=[4611686018427387904,1]", 2, in, 1, KILN_ERR_SHAPE,
                               "conv dilation overflowing int64");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(4, 1, 3, 3), NULL);
    fails += kiln_optest_fails("Conv", "group=2", 2, in, 1, KILN_ERR_SHAPE,
                               "conv group does not divide C");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 4, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(3, 2, 3, 3), NULL);
    fails += kiln_optest_fails("Conv", "group=2", 2, in, 1, KILN_ERR_SHAPE,
                               "conv group does not divide M");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(2, 1, 3, 3), NULL);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("Conv", "", 3, in, 1, KILN_ERR_SHAPE, "conv bias length");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    fails += kiln_optest_fails("Conv", "", 2, in, 1, KILN_ERR_SHAPE, "conv kernel too big");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    fails += kiln_optest_fails("Conv", "kernel_shape=[2,2]", 2, in, 1, KILN_ERR_SHAPE,
                               "conv kernel_shape disagrees with W");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 5, 5), NULL);
    in[1] = kt_make(KILN_F64, 4, KT_DIMS(1, 1, 3, 3), NULL);
    fails += kiln_optest_fails("Conv", "", 2, in, 1, KILN_ERR_TYPE, "conv dtype mismatch");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    fails += kiln_optest_fails("Conv", "strides=[1]", 2, in, 1, KILN_ERR_SHAPE,
                               "conv strides count");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Conv", "pads=[1,1,1,1];strides=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 13, 11), -1, 1, 201),
                                                kt_rand(KILN_F32, 4, KT_DIMS(7, 5, 3, 3), -1, 1, 202),
                                                kt_rand(KILN_F32, 1, KT_DIMS(7), -1, 1, 203)},
                               1, "conv random 3x3 stride 2 odd sizes");
    fails += kiln_optest_sweep("Conv", "group=6;pads=[1,1,1,1]", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 6, 9, 13), -1, 1, 204),
                                                kt_rand(KILN_F32, 4, KT_DIMS(6, 1, 3, 3), -1, 1, 205)},
                               1, "conv random depthwise");
    /* grouped, not depthwise (RegNet's, ResNeXt's: on CUDA cuDNN's legacy API or its ConvFwd
     * graph, as conv_graph_decide times them), with and without a bias */
    fails += kiln_optest_sweep("Conv", "group=4;pads=[1,1,1,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 32, 9, 11), -1, 1, 260),
                                                kt_rand(KILN_F32, 4, KT_DIMS(16, 8, 3, 3), -1, 1, 261),
                                                kt_rand(KILN_F32, 1, KT_DIMS(16), -1, 1, 262)},
                               1, "conv random grouped 3x3, 4 groups of 8");
    fails += kiln_optest_sweep("Conv", "group=2;pads=[1,1,1,1];strides=[2,2]", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 32, 10, 9), -1, 1, 263),
                                                kt_rand(KILN_F32, 4, KT_DIMS(48, 16, 3, 3), -1, 1, 264)},
                               1, "conv random grouped 3x3 stride 2, 2 groups of 16, no bias");
    fails += kiln_optest_sweep("Conv", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 17, 7, 9), -1, 1, 206),
                                                kt_rand(KILN_F32, 4, KT_DIMS(9, 17, 1, 1), -1, 1, 207),
                                                kt_rand(KILN_F32, 1, KT_DIMS(9), -1, 1, 208)},
                               1, "conv random 1x1, 17 channels");
    fails += kiln_optest_sweep("Conv", "pads=[2,2,2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 1, 15, 13), -1, 1, 209),
                                                kt_rand(KILN_F32, 4, KT_DIMS(4, 1, 5, 5), -1, 1, 210),
                                                kt_rand(KILN_F32, 1, KT_DIMS(4), -1, 1, 211)},
                               1, "conv random one input channel 5x5");
    /* depthwise (group == C == M: CUDA's conv_depthwise.cu), NCHW and NHWC in the sweep: C
     * a multiple of 8 (NHWC: its vector path) or not (its scalar path), odd sizes, tiles of
     * 4 output columns with a partial last one, 3x3 to 9x9, stride 2, dilation 2,
     * asymmetric pads, 1-D */
    fails += kiln_optest_sweep("Conv", "group=13;pads=[1,1,1,1];strides=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 13, 11, 9), -1, 1, 230),
                                                kt_rand(KILN_F32, 4, KT_DIMS(13, 1, 3, 3), -1, 1, 231),
                                                kt_rand(KILN_F32, 1, KT_DIMS(13), -1, 1, 232)},
                               1, "conv random depthwise 3x3 stride 2, 13 channels");
    fails += kiln_optest_sweep("Conv", "group=24;pads=[2,2,2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 24, 9, 11), -1, 1, 233),
                                                kt_rand(KILN_F32, 4, KT_DIMS(24, 1, 5, 5), -1, 1, 234),
                                                kt_rand(KILN_F32, 1, KT_DIMS(24), -1, 1, 235)},
                               1, "conv random depthwise 5x5, 24 channels");
    fails += kiln_optest_sweep("Conv", "group=16;pads=[3,3,3,3]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 16, 7, 13), -1, 1, 236),
                                                kt_rand(KILN_F32, 4, KT_DIMS(16, 1, 7, 7), -1, 1, 237),
                                                kt_rand(KILN_F32, 1, KT_DIMS(16), -1, 1, 238)},
                               1, "conv random depthwise 7x7, 16 channels");
    fails += kiln_optest_sweep("Conv", "group=16;pads=[2,2,2,2];dilations=[2,2]", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 10, 9), -1, 1, 239),
                                                kt_rand(KILN_F32, 4, KT_DIMS(16, 1, 3, 3), -1, 1, 240)},
                               1, "conv random depthwise 3x3 dilation 2, no bias");
    fails += kiln_optest_sweep("Conv", "group=8;pads=[0,1,2,1];strides=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 10, 11), -1, 1, 242),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 1, 3, 3), -1, 1, 243),
                                                kt_rand(KILN_F32, 1, KT_DIMS(8), -1, 1, 244)},
                               1, "conv random depthwise asymmetric pads stride 2");
    fails += kiln_optest_sweep("Conv", "group=8;pads=[4,4,4,4]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 10, 12), -1, 1, 245),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 1, 9, 9), -1, 1, 246),
                                                kt_rand(KILN_F32, 1, KT_DIMS(8), -1, 1, 247)},
                               1, "conv random depthwise 9x9");
    fails += kiln_optest_sweep("Conv", "group=16;pads=[2,1,2,1];strides=[2,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 16, 9, 7), -1, 1, 248),
                                                kt_rand(KILN_F32, 4, KT_DIMS(16, 1, 5, 3), -1, 1, 249),
                                                kt_rand(KILN_F32, 1, KT_DIMS(16), -1, 1, 250)},
                               1, "conv random depthwise 5x3 strides 2,1");
    fails += kiln_optest_sweep("Conv", "group=7;pads=[3,3,3,3];dilations=[1,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 7, 8, 15), -1, 1, 251),
                                                kt_rand(KILN_F32, 4, KT_DIMS(7, 1, 7, 7), -1, 1, 252),
                                                kt_rand(KILN_F32, 1, KT_DIMS(7), -1, 1, 253)},
                               1, "conv random depthwise 7x7 dilations 1,2, 7 channels");
    fails += kiln_optest_sweep("Conv", "group=16;pads=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 16, 21), -1, 1, 254),
                                                kt_rand(KILN_F32, 3, KT_DIMS(16, 1, 5), -1, 1, 255),
                                                kt_rand(KILN_F32, 1, KT_DIMS(16), -1, 1, 256)},
                               1, "conv random depthwise 1-D");
    /* ConvNeXt's depthwise 7x7 pad 3 at its channel counts (CUDA NHWC: the tiled kernel, its
     * patch split in row, column and channel tiles, a part-filled last channel chunk), and
     * EfficientNet's 3x3 / 5x5 at 144 / 40 channels, and with stride 2 at 96 / 144 */
    static const struct {
        int64_t c, h, w, k, s;
    } dw_real[] = {{96, 9, 19, 7, 1},  {192, 7, 9, 7, 1}, {384, 5, 6, 7, 1},   {768, 3, 4, 7, 1},
                   {144, 10, 13, 3, 1}, {40, 6, 66, 5, 1}, {96, 11, 20, 3, 2}, {144, 9, 9, 5, 2}};
    for (size_t i = 0; i < sizeof dw_real / sizeof dw_real[0]; i++) {
        const int64_t c = dw_real[i].c, k = dw_real[i].k, p = k / 2;
        char at[160], lb[160];
        snprintf(at, sizeof at, "group=%lld;pads=[%lld,%lld,%lld,%lld];strides=[%lld,%lld]", (long long)c, (long long)p,
                 (long long)p, (long long)p, (long long)p, (long long)dw_real[i].s, (long long)dw_real[i].s);
        snprintf(lb, sizeof lb, "conv random depthwise %lldx%lld stride %lld, %lld channels", (long long)k, (long long)k,
                 (long long)dw_real[i].s, (long long)c);
        fails += kiln_optest_sweep("Conv", at, 0, 3,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, c, dw_real[i].h, dw_real[i].w), -1,
                                                             1, 257 + 3 * i),
                                                     kt_rand(KILN_F32, 4, KT_DIMS(c, 1, k, k), -1, 1, 258 + 3 * i),
                                                     kt_rand(KILN_F32, 1, KT_DIMS(c), -1, 1, 259 + 3 * i)},
                                   1, lb);
    }
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Conv", "pads=[1,1,1,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 9, 11), -2, 2, 1193),
                                                kt_rand(KILN_F32, 4, KT_DIMS(4, 3, 3, 3), -2, 2, 1194),
                                                kt_rand(KILN_F32, 1, KT_DIMS(4), -2, 2, 1195)},
                               1, "conv 3x3 pad 1 bias");
    fails += kiln_optest_sweep("Conv", "kernel_shape=[3,3];strides=[2,2]", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 4, 10, 9), -2, 2, 1196),
                                                kt_rand(KILN_F32, 4, KT_DIMS(6, 4, 3, 3), -2, 2, 1197)},
                               1, "conv stride 2");
    fails += kiln_optest_sweep("Conv", "dilations=[2,2];pads=[2,2,2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 12, 10), -2, 2, 1198),
                                                kt_rand(KILN_F32, 4, KT_DIMS(5, 3, 3, 3), -2, 2, 1199),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), -2, 2, 1200)},
                               1, "conv dilation 2");
    fails += kiln_optest_sweep("Conv", "group=2;pads=[1,1,1,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 7, 7), -2, 2, 1201),
                                                kt_rand(KILN_F32, 4, KT_DIMS(6, 2, 3, 3), -2, 2, 1202),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), -2, 2, 1203)},
                               1, "conv 2 groups");
    fails += kiln_optest_sweep("Conv", "group=8;pads=[1,1,1,1]", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 12, 12), -2, 2, 1204),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 1, 3, 3), -2, 2, 1205)},
                               1, "conv depthwise");
    fails += kiln_optest_sweep("Conv", "pads=[0,1,2,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 8, 8), -2, 2, 1206),
                                                kt_rand(KILN_F32, 4, KT_DIMS(5, 3, 3, 3), -2, 2, 1207),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), -2, 2, 1208)},
                               1, "conv asymmetric pads");
    fails += kiln_optest_sweep("Conv", "auto_pad=SAME_UPPER;strides=[2,2]", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 9, 9), -2, 2, 1209),
                                                kt_rand(KILN_F32, 4, KT_DIMS(4, 3, 4, 4), -2, 2, 1210)},
                               1, "conv SAME_UPPER stride 2");
    fails += kiln_optest_sweep("Conv", "auto_pad=SAME_LOWER", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 6, 7), -2, 2, 1211),
                                                kt_rand(KILN_F32, 4, KT_DIMS(3, 2, 2, 2), -2, 2, 1212)},
                               1, "conv SAME_LOWER even kernel");
    fails += kiln_optest_sweep("Conv", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 5, 5), -2, 2, 1213),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 16, 1, 1), -2, 2, 1214),
                                                kt_rand(KILN_F32, 1, KT_DIMS(8), -2, 2, 1215)},
                               1, "conv 1x1 bias");
    /* channel-padded (the pad-channels pass: weights of channels 3.. zero, used_channels=3):
     * CUDA may convolve the 3 real channels alone (conv.c's narrow copy; backend_ops_narrow
     * forces it); X's padding channel is not zero here, so reading it with a zero weight is
     * what keeps the result */
    fails += kiln_optest_sweep("Conv", "pads=[1,1,1,1];strides=[2,2];used_channels=3", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 13, 10), -2, 2, 1240),
                                                kt_zero_from(kt_rand(KILN_F32, 4, KT_DIMS(16, 4, 3, 3), -2, 2, 1241), 3),
                                                kt_rand(KILN_F32, 1, KT_DIMS(16), -2, 2, 1242)},
                               1, "conv channel-padded 4 -> 16 3x3 stride 2 (used_channels 3)");
    fails += kiln_optest_sweep("Conv", "strides=[4,4];used_channels=5", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 16, 12), -2, 2, 1243),
                                                kt_zero_from(kt_rand(KILN_F32, 4, KT_DIMS(24, 8, 4, 4), -2, 2, 1244), 5)},
                               1, "conv channel-padded 8 -> 24 4x4 stride 4 (used_channels 5)");
    fails += kiln_optest_sweep("Conv", "pads=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 20), -2, 2, 1216),
                                                kt_rand(KILN_F32, 3, KT_DIMS(4, 3, 5), -2, 2, 1217),
                                                kt_rand(KILN_F32, 1, KT_DIMS(4), -2, 2, 1218)},
                               1, "conv 1-D");
    fails += kiln_optest_sweep("Conv", "pads=[1,1,1,1];strides=[1,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 32, 14, 14), -2, 2, 1219),
                                                kt_rand(KILN_F32, 4, KT_DIMS(48, 32, 3, 3), -2, 2, 1220),
                                                kt_rand(KILN_F32, 1, KT_DIMS(48), -2, 2, 1221)},
                               1, "conv wider");
    /* grouped and depthwise gradients (on CUDA: cuDNN's legacy API, kiln's depthwise kernels
     * or cuDNN's ConvBwdData / ConvBwdFilter graphs, as timed or forced) */
    fails += kiln_optest_sweep("ConvGradInput", "group=4;pads=[1,1,1,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 9, 7), -2, 2, 3060),
                                                kt_rand(KILN_F32, 4, KT_DIMS(16, 8, 3, 3), -2, 2, 3061),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 32, 9, 7), -2, 2, 3062)},
                               1, "convgradinput grouped 3x3, 4 groups of 8");
    fails += kiln_optest_sweep("ConvGradWeight", "group=2;pads=[1,1,1,1];strides=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 32, 10, 9), -2, 2, 3063),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 5, 5), -2, 2, 3064),
                                                kt_rand(KILN_F32, 4, KT_DIMS(16, 16, 3, 3), -2, 2, 3065)},
                               1, "convgradweight grouped 3x3 stride 2, 2 groups of 16");
    fails += kiln_optest_sweep("ConvGradInput", "group=24;pads=[1,1,1,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 24, 8, 9), -2, 2, 3066),
                                                kt_rand(KILN_F32, 4, KT_DIMS(24, 1, 3, 3), -2, 2, 3067),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 24, 8, 9), -2, 2, 3068)},
                               1, "convgradinput depthwise 3x3, 24 channels");
    fails += kiln_optest_sweep("ConvGradWeight", "group=24;pads=[2,2,2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 24, 8, 9), -2, 2, 3069),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 24, 8, 9), -2, 2, 3070),
                                                kt_rand(KILN_F32, 4, KT_DIMS(24, 1, 5, 5), -2, 2, 3071)},
                               1, "convgradweight depthwise 5x5, 24 channels");
    fails += kiln_optest_sweep("ConvGradInput", "kernel_shape=[3,3]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(8, 64, 24, 24), -2, 2, 3004),
                                                kt_rand(KILN_F32, 4, KT_DIMS(64, 32, 3, 3), -2, 2, 3005),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 32, 26, 26), -2, 2, 3006)},
                               1, "convgradinput mnist conv2 (batch 8)");
    fails += kiln_optest_sweep("ConvGradWeight", "kernel_shape=[3,3]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(8, 32, 26, 26), -2, 2, 3007),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 64, 24, 24), -2, 2, 3008),
                                                kt_rand(KILN_F32, 4, KT_DIMS(64, 32, 3, 3), -2, 2, 3009)},
                               1, "convgradweight mnist conv2 (batch 8)");
    fails += kiln_optest_sweep("ConvGradInput", "kernel_shape=[3,3]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(8, 32, 26, 26), -2, 2, 3010),
                                                kt_rand(KILN_F32, 4, KT_DIMS(32, 1, 3, 3), -2, 2, 3011),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 1, 28, 28), -2, 2, 3012)},
                               1, "convgradinput mnist conv1 (batch 8)");
    fails += kiln_optest_sweep("ConvGradWeight", "kernel_shape=[3,3]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(8, 1, 28, 28), -2, 2, 3013),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 32, 26, 26), -2, 2, 3014),
                                                kt_rand(KILN_F32, 4, KT_DIMS(32, 1, 3, 3), -2, 2, 3015)},
                               1, "convgradweight mnist conv1 (batch 8)");
    fails += kiln_optest_sweep("ConvGradInput", "pads=[1,1,1,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 9, 11), -2, 2, 3016),
                                                kt_rand(KILN_F32, 4, KT_DIMS(4, 3, 3, 3), -2, 2, 3017),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 9, 11), -2, 2, 3018)},
                               1, "convgradinput 3x3 pad 1");
    fails += kiln_optest_sweep("ConvGradWeight", "pads=[1,1,1,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 9, 11), -2, 2, 3019),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 9, 11), -2, 2, 3020),
                                                kt_rand(KILN_F32, 4, KT_DIMS(4, 3, 3, 3), -2, 2, 3021)},
                               1, "convgradweight 3x3 pad 1");
    fails += kiln_optest_sweep("ConvGradInput", "kernel_shape=[3,3];strides=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 6, 4, 4), -2, 2, 3022),
                                                kt_rand(KILN_F32, 4, KT_DIMS(6, 4, 3, 3), -2, 2, 3023),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 4, 10, 9), -2, 2, 3024)},
                               1, "convgradinput stride 2");
    fails += kiln_optest_sweep("ConvGradWeight", "kernel_shape=[3,3];strides=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 4, 10, 9), -2, 2, 3025),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 6, 4, 4), -2, 2, 3026),
                                                kt_rand(KILN_F32, 4, KT_DIMS(6, 4, 3, 3), -2, 2, 3027)},
                               1, "convgradweight stride 2");
    fails += kiln_optest_sweep("ConvGradInput", "dilations=[2,2];pads=[2,2,2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 5, 12, 10), -2, 2, 3028),
                                                kt_rand(KILN_F32, 4, KT_DIMS(5, 3, 3, 3), -2, 2, 3029),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 12, 10), -2, 2, 3030)},
                               1, "convgradinput dilation 2");
    fails += kiln_optest_sweep("ConvGradWeight", "dilations=[2,2];pads=[2,2,2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 12, 10), -2, 2, 3031),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 5, 12, 10), -2, 2, 3032),
                                                kt_rand(KILN_F32, 4, KT_DIMS(5, 3, 3, 3), -2, 2, 3033)},
                               1, "convgradweight dilation 2");
    fails += kiln_optest_sweep("ConvGradInput", "group=2;pads=[1,1,1,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 7, 7), -2, 2, 3034),
                                                kt_rand(KILN_F32, 4, KT_DIMS(6, 2, 3, 3), -2, 2, 3035),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 7, 7), -2, 2, 3036)},
                               1, "convgradinput 2 groups");
    fails += kiln_optest_sweep("ConvGradWeight", "group=2;pads=[1,1,1,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 7, 7), -2, 2, 3037),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 7, 7), -2, 2, 3038),
                                                kt_rand(KILN_F32, 4, KT_DIMS(6, 2, 3, 3), -2, 2, 3039)},
                               1, "convgradweight 2 groups");
    fails += kiln_optest_sweep("ConvGradInput", "group=8;pads=[1,1,1,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 12, 12), -2, 2, 3040),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 1, 3, 3), -2, 2, 3041),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 12, 12), -2, 2, 3042)},
                               1, "convgradinput depthwise");
    /* depthwise input gradients with strides, dilations and asymmetric pads (CUDA's
     * conv_depthwise.cu gathers them), an odd channel count, and a 7x7 */
    fails += kiln_optest_sweep("ConvGradInput", "group=13;pads=[0,1,2,1];strides=[2,2];dilations=[2,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 13, 5, 5), -2, 2, 3090),
                                                kt_rand(KILN_F32, 4, KT_DIMS(13, 1, 3, 3), -2, 2, 3091),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 13, 11, 10), -2, 2, 3092)},
                               1, "convgradinput depthwise strided, dilated, asymmetric pads");
    fails += kiln_optest_sweep("ConvGradInput", "group=16;pads=[3,3,3,3]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 16, 9, 8), -2, 2, 3093),
                                                kt_rand(KILN_F32, 4, KT_DIMS(16, 1, 7, 7), -2, 2, 3094),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 16, 9, 8), -2, 2, 3095)},
                               1, "convgradinput depthwise 7x7");
    fails += kiln_optest_sweep("ConvGradWeight", "group=8;pads=[1,1,1,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 12, 12), -2, 2, 3043),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 12, 12), -2, 2, 3044),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 1, 3, 3), -2, 2, 3045)},
                               1, "convgradweight depthwise");
    /* depthwise gradients (CUDA: conv_depthwise_grad.cu with conv_dw_grad on, test_backend_ops
     * --dw-grad): C a multiple of 8, of 4 only, or odd (the any-layout kernel); 3x3 to 9x9;
     * strides 1 and 2, dilation, asymmetric pads; wider than one 64-column slab; dX with
     * stride 1 (the flipped filter on the forward kernels), stride 2 (the gather), and pads
     * beyond the filter's reach */
    fails += kiln_optest_sweep("ConvGradWeight", "group=16;pads=[3,3,3,3]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 13, 12), -2, 2, 3100),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 13, 12), -2, 2, 3101),
                                                kt_rand(KILN_F32, 4, KT_DIMS(16, 1, 7, 7), -2, 2, 3102)},
                               1, "convgradweight depthwise 7x7, 16 channels");
    fails += kiln_optest_sweep("ConvGradWeight", "group=32;pads=[3,3,3,3]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 32, 20, 19), -2, 2, 3103),
                                                kt_rand(KILN_F32, 4, KT_DIMS(3, 32, 20, 19), -2, 2, 3104),
                                                kt_rand(KILN_F32, 4, KT_DIMS(32, 1, 7, 7), -2, 2, 3105)},
                               1, "convgradweight depthwise 7x7, 32 channels, 20x19 (several row slabs)");
    fails += kiln_optest_sweep("ConvGradWeight", "group=13;pads=[2,2,2,2];strides=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 13, 11, 10), -2, 2, 3106),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 13, 6, 5), -2, 2, 3107),
                                                kt_rand(KILN_F32, 4, KT_DIMS(13, 1, 5, 5), -2, 2, 3108)},
                               1, "convgradweight depthwise 5x5 stride 2, 13 channels");
    fails += kiln_optest_sweep("ConvGradWeight", "group=24;pads=[1,1,1,1];strides=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 24, 15, 15), -2, 2, 3109),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 24, 8, 8), -2, 2, 3110),
                                                kt_rand(KILN_F32, 4, KT_DIMS(24, 1, 3, 3), -2, 2, 3111)},
                               1, "convgradweight depthwise 3x3 stride 2, 24 channels");
    fails += kiln_optest_sweep("ConvGradWeight", "group=12;pads=[1,2,2,0];dilations=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 12, 10, 9), -2, 2, 3112),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 12, 9, 7), -2, 2, 3113),
                                                kt_rand(KILN_F32, 4, KT_DIMS(12, 1, 3, 3), -2, 2, 3114)},
                               1, "convgradweight depthwise 3x3 dilation 2, asymmetric pads, 12 channels");
    fails += kiln_optest_sweep("ConvGradWeight", "group=8;pads=[1,1,1,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 5, 70), -2, 2, 3115),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 5, 70), -2, 2, 3116),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 1, 3, 3), -2, 2, 3117)},
                               1, "convgradweight depthwise 3x3, 70 columns (two column slabs)");
    fails += kiln_optest_sweep("ConvGradWeight", "group=8;pads=[4,4,4,4]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 12, 12), -2, 2, 3118),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 12, 12), -2, 2, 3119),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 1, 9, 9), -2, 2, 3120)},
                               1, "convgradweight depthwise 9x9");
    fails += kiln_optest_sweep("ConvGradInput", "group=16;pads=[1,1,1,1];strides=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 8, 8), -2, 2, 3121),
                                                kt_rand(KILN_F32, 4, KT_DIMS(16, 1, 3, 3), -2, 2, 3122),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 15, 15), -2, 2, 3123)},
                               1, "convgradinput depthwise 3x3 stride 2, 16 channels");
    fails += kiln_optest_sweep("ConvGradInput", "group=24;pads=[2,1,3,4];dilations=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 24, 8, 7), -2, 2, 3124),
                                                kt_rand(KILN_F32, 4, KT_DIMS(24, 1, 5, 5), -2, 2, 3125),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 24, 11, 10), -2, 2, 3126)},
                               1, "convgradinput depthwise 5x5 dilation 2, asymmetric pads");
    fails += kiln_optest_sweep("ConvGradInput", "group=8;pads=[3,3,3,3]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 10, 10), -2, 2, 3127),
                                                kt_rand(KILN_F32, 4, KT_DIMS(8, 1, 3, 3), -2, 2, 3128),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 8, 6, 6), -2, 2, 3129)},
                               1, "convgradinput depthwise 3x3 pads beyond the filter's reach");
    fails += kiln_optest_sweep("ConvGradInput", "group=96;pads=[3,3,3,3]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 96, 14, 13), -2, 2, 3130),
                                                kt_rand(KILN_F32, 4, KT_DIMS(96, 1, 7, 7), -2, 2, 3131),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 96, 14, 13), -2, 2, 3132)},
                               1, "convgradinput depthwise 7x7, 96 channels (convnext)");
    fails += kiln_optest_sweep("ConvGradInput", "pads=[0,1,2,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 5, 8, 8), -2, 2, 3046),
                                                kt_rand(KILN_F32, 4, KT_DIMS(5, 3, 3, 3), -2, 2, 3047),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 8, 8), -2, 2, 3048)},
                               1, "convgradinput asymmetric pads");
    fails += kiln_optest_sweep("ConvGradWeight", "pads=[0,1,2,1]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 8, 8), -2, 2, 3049),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 5, 8, 8), -2, 2, 3050),
                                                kt_rand(KILN_F32, 4, KT_DIMS(5, 3, 3, 3), -2, 2, 3051)},
                               1, "convgradweight asymmetric pads");
    fails += kiln_optest_sweep("ConvGradInput", "auto_pad=SAME_UPPER;strides=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 4, 5, 5), -2, 2, 3052),
                                                kt_rand(KILN_F32, 4, KT_DIMS(4, 3, 4, 4), -2, 2, 3053),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 9, 9), -2, 2, 3054)},
                               1, "convgradinput SAME_UPPER stride 2");
    fails += kiln_optest_sweep("ConvGradWeight", "auto_pad=SAME_UPPER;strides=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 9, 9), -2, 2, 3055),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 4, 5, 5), -2, 2, 3056),
                                                kt_rand(KILN_F32, 4, KT_DIMS(4, 3, 4, 4), -2, 2, 3057)},
                               1, "convgradweight SAME_UPPER stride 2");
    fails += kiln_optest_sweep("ConvGradInput", "pads=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 4, 20), -2, 2, 3058),
                                                kt_rand(KILN_F32, 3, KT_DIMS(4, 3, 5), -2, 2, 3059),
                                                kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 20), -2, 2, 3060)},
                               1, "convgradinput 1-D");
    fails += kiln_optest_sweep("ConvGradWeight", "pads=[2,2]", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 20), -2, 2, 3061),
                                                kt_rand(KILN_F32, 3, KT_DIMS(2, 4, 20), -2, 2, 3062),
                                                kt_rand(KILN_F32, 3, KT_DIMS(4, 3, 5), -2, 2, 3063)},
                               1, "convgradweight 1-D");
    fails += kiln_optest_sweep_tol("ConvGradBias", "", 0, 1,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), -2, 2, 3064)},
                                   1, 0.0001, 0, "convgradbias 2-D");
    fails += kiln_optest_sweep_tol("ConvGradBias", "", 0, 1,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(32, 64, 24, 24), -2, 2, 3065)},
                                   1, 0.0001, 0, "convgradbias mnist conv2 (batch 32), partial sums");
    fails += kiln_optest_sweep_tol("ConvGradBias", "", 0, 1,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(16, 32, 26, 26), -2, 2, 3066)},
                                   1, 0.0001, 0, "convgradbias mnist conv1 (batch 16)");
    fails += kiln_optest_sweep_tol("ConvGradBias", "", 0, 1,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(8, 64, 24, 24), -2, 2, 3067)},
                                   1, 0.0001, 0, "convgradbias mnist conv2 (batch 8), one block a channel");
    fails += kiln_optest_sweep_tol("ConvGradBias", "", 0, 1,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 4), -2, 2, 3068)},
                                   1, 0.0001, 0, "convgradbias rank 2");
    fails += kiln_optest_sweep_tol("ConvGradBias", "", 0, 1,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 20), -2, 2, 3069)},
                                   1, 0.0001, 0, "convgradbias 1-D");
    fails += kiln_optest_sweep_tol("ConvGradBias", "", 0, 1,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(4, 1, 5, 5), -2, 2, 3070)},
                                   1, 0.0001, 0, "convgradbias one channel");
    fails += kiln_optest_sweep_tol("ConvGradBias", "", 0, 1,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 5, 7, 9), -2, 2, 3071)},
                                   1, 0.0001, 0, "convgradbias odd");
    return fails;
}
#endif /* KILN_OPTESTS */

/* Profile FLOPs: each output of channel m sums C/group * prod(k) products of W (M, C/group, k...). */
static double conv_flops(const kiln_op_ctx *c) {
    const kiln_tensor *w = c->n_in > 1 ? c->in[1] : NULL, *y = c->n_out > 0 ? c->out[0] : NULL;
    if (!c->in[0] || !w || !y || w->ndim < 1 || w->dims[0] <= 0) return 0;
    return 2.0 * (double)kiln_tensor_numel(y) * (double)kiln_tensor_numel(w) / (double)w->dims[0];
}

const kiln_op_def kiln_op_conv = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_CONV, .flops = conv_flops,
    .name = "Conv", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test),
    .grad = grad,
};

/* Tiny cases for the grad ops. Expected values: the 3x3 case by hand (dW[i,j] = sum of
 * dY * X shifted by (i,j); dX is the full convolution of dY with W), the grouped case with
 * a direct numpy loop over (n, m, o, c, k) accumulating dY*W into dX and dY*X into dW. */
#define GX3 KT_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9)
#define GXG KT_VALS(1, 2, -3, 2, 0, 0, 1, -1, 3, -3, -2, -1, 0, -1, -3, -3, -3, -3, -2, 3, -2, \
    1, 2, -2, -2, 0, -2, 3, -2, 3, 2, 2, -3, -1, 1, 0, 1, 1, 1, -3, 3, 0, 3, -2, -1, 3, -2, -3)
#define GWG KT_VALS(-1, 1, -2, 2, -1, -1, 0, 2, 2, 2, -1, -2, 1, 1, 1, -2)
#define GDYG KT_VALS(-2, 0, -1, 0, 2, -1, 0, -1, -1, 2, -2, -1)
#define GATTRS "strides=[2,1];pads=[1,0,0,1];group=2"

#ifdef KILN_OPTESTS
static int test_grad_input(void) {
    int fails = 0;
    kiln_tensor *in[3] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 2, 3, 4)),
                          kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 2, 3, 4)),
                          kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), GX3)};
    kiln_tensor *want = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3),
                                KT_VALS(1, 4, 4, 6, 20, 16, 9, 24, 16));
    fails += kiln_optest("ConvGradInput", "", 3, in, 1, &want, 0, 0, "conv dX 3x3 by hand");
    in[0] = kt_make(KILN_F64, 4, KT_DIMS(1, 2, 2, 3), GDYG);
    in[1] = kt_make(KILN_F64, 4, KT_DIMS(2, 2, 2, 2), GWG);
    in[2] = kt_make(KILN_F64, 4, KT_DIMS(1, 4, 4, 3), NULL);
    want = kt_make(KILN_F64, 4, KT_DIMS(1, 4, 4, 3), KT_VALS(4, -4, 2, 0, -2, 3, 0, -4, 6, 0,
        0, 0, 0, -4, 0, 0, -2, -1, 0, 0, 4, 0, 0, 0, 0, 1, 3, 4, 0, -6, -2, -2, 5, 0, 0, 0, 0,
        -1, 1, 2, 0, -3, 2, -6, 3, 0, 0, 0));
    fails += kiln_optest("ConvGradInput", GATTRS, 3, in, 1, &want, 0, 0,
                         "conv dX grouped strides pads f64");
    in[0] = kt_make(KILN_F16, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_F16, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 2, 3, 4));
    in[2] = kt_make(KILN_F16, 4, KT_DIMS(1, 1, 3, 3), NULL);
    want = kt_make(KILN_F16, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(1, 4, 4, 6, 20, 16, 9, 24, 16));
    fails += kiln_optest("ConvGradInput", "", 3, in, 1, &want, 0, 0, "conv dX f16");
    /* BLAS paths against the direct loop: products run side by side (depthwise), in turn
     * (three big products: in turn on two threads), and without col2im (1x1). */
    fails += random_grad_case("conv dX random depthwise",
                              &(rand_conv){.nd = 2, .N = 3, .C = 8, .M = 8, .G = 8,
                                           .in = {9, 10}, .k = {3, 3}, .s = {2, 1},
                                           .pb = {1, 1}, .pe = {1, 0}},
                              0, 81);
    fails += random_grad_case("conv dX random large",
                              &(rand_conv){.nd = 2, .N = 3, .C = 32, .M = 64, .G = 1,
                                           .in = {14, 14}, .k = {3, 3}},
                              0, 82);
    fails += random_grad_case("conv dX random 1x1",
                              &(rand_conv){.nd = 2, .N = 2, .C = 5, .M = 3, .G = 1,
                                           .in = {4, 6}, .k = {1, 1}},
                              0, 83);
    fails += random_grad_case("conv dX random 1-D dilated",
                              &(rand_conv){.nd = 1, .N = 2, .C = 4, .M = 6, .G = 2,
                                           .in = {19}, .k = {3}, .s = {2}, .d = {3},
                                           .pb = {2}, .pe = {1}},
                              0, 84);
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[2] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    fails += kiln_optest_fails("ConvGradInput", "", 3, in, 1, KILN_ERR_SHAPE,
                               "conv dX with dY of the wrong shape");
    return fails;
}

static int test_grad_weight(void) {
    int fails = 0;
    kiln_tensor *in[4] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), GX3),
                          kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 2, 3, 4)),
                          kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL)};
    kiln_tensor *want = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(37, 47, 67, 77));
    fails += kiln_optest("ConvGradWeight", "", 3, in, 1, &want, 0, 0, "conv dW 3x3 by hand");
    in[0] = kt_make(KILN_F64, 4, KT_DIMS(1, 4, 4, 3), GXG);
    in[1] = kt_make(KILN_F64, 4, KT_DIMS(1, 2, 2, 3), GDYG);
    in[2] = kt_make(KILN_F64, 4, KT_DIMS(2, 2, 2, 2), NULL);
    want = kt_make(KILN_F64, 4, KT_DIMS(2, 2, 2, 2),
                   KT_VALS(0, 0, -4, 2, -3, -6, 11, -2, 7, -10, 5, 12, -12, 6, 9, -3));
    fails += kiln_optest("ConvGradWeight", GATTRS, 3, in, 1, &want, 0, 0,
                         "conv dW grouped strides pads f64");
    in[0] = kt_make(KILN_BF16, 4, KT_DIMS(1, 1, 3, 3), GX3);
    in[1] = kt_make(KILN_BF16, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 2, 3, 4));
    in[2] = kt_make(KILN_BF16, 4, KT_DIMS(1, 1, 2, 2), NULL);
    want = kt_make(KILN_BF16, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(37, 47, 67, 77));
    fails += kiln_optest("ConvGradWeight", "", 3, in, 1, &want, 0, 0, "conv dW bf16");
    /* Accumulation over the batch: per-thread partial sums (small products side by side),
     * one dW summed in turn (big products), no im2col (1x1), grouped. */
    fails += random_grad_case("conv dW random batch 16 small products",
                              &(rand_conv){.nd = 2, .N = 16, .C = 1, .M = 8, .G = 1,
                                           .in = {10, 10}, .k = {3, 3}},
                              1, 91);
    fails += random_grad_case("conv dW random large",
                              &(rand_conv){.nd = 2, .N = 3, .C = 32, .M = 64, .G = 1,
                                           .in = {14, 14}, .k = {3, 3}},
                              1, 92);
    fails += random_grad_case("conv dW random 1x1",
                              &(rand_conv){.nd = 2, .N = 3, .C = 5, .M = 3, .G = 1,
                                           .in = {4, 6}, .k = {1, 1}},
                              1, 93);
    fails += random_grad_case("conv dW random depthwise dilated",
                              &(rand_conv){.nd = 2, .N = 4, .C = 6, .M = 6, .G = 6,
                                           .in = {9, 8}, .k = {3, 2}, .d = {2, 1},
                                           .pb = {2, 0}, .pe = {1, 1}},
                              1, 94);
    /* the prologue (input 3): X read as act(a * X + k), padded with zeros after it */
    {
        kiln_tensor *pin[4] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(-1, 0, 1, 2)),
                               kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 1, 1, 1)),
                               kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL),
                               kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(2, 1))};
        /* X' = relu(2x + 1) = (0, 1; 3, 5), padded by 1 with zeros (not relu(k) = 1), dY = 1:
         * dW[i][j] is the sum of the 2x2 window at (i, j) of [0 0 0 0; 0 0 1 0; 0 3 5 0; 0 0 0 0] */
        kiln_tensor *pw = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(0, 1, 1, 3, 9, 6, 3, 8, 5));
        fails += kiln_optest("ConvGradWeight", "pads=[1,1,1,1];kernel_shape=[3,3];prologue_relu=1", 4, pin, 1, &pw,
                             0, 0, "conv dW prologue relu(2x + 1) by hand, zero padding after it");
    }
    fails += prologue_grad_case("conv dW prologue relu, f32, padded 3x3",
                                &(rand_conv){.nd = 2, .N = 2, .C = 5, .M = 4, .G = 1, .in = {6, 7}, .k = {3, 3},
                                             .pb = {1, 1}, .pe = {1, 1}},
                                KILN_F32, true, 95);
    fails += prologue_grad_case("conv dW prologue relu, f16, strided 1x1",
                                &(rand_conv){.nd = 2, .N = 3, .C = 8, .M = 6, .G = 1, .in = {6, 6}, .k = {1, 1},
                                             .s = {2, 2}},
                                KILN_F16, true, 96);
    fails += prologue_grad_case("conv dW prologue without relu, f64, grouped",
                                &(rand_conv){.nd = 2, .N = 2, .C = 6, .M = 4, .G = 2, .in = {5, 5}, .k = {3, 3},
                                             .pb = {1, 0}, .pe = {0, 1}},
                                KILN_F64, false, 97);
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 3, 3), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    in[2] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 1), NULL);
    in[3] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("ConvGradWeight", "", 4, in, 1, KILN_ERR_SHAPE,
                               "conv dW prologue of the wrong channel count rejected");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), NULL);
    in[1] = kt_make(KILN_F64, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[2] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    fails += kiln_optest_fails("ConvGradWeight", "", 3, in, 1, KILN_ERR_TYPE,
                               "conv dW with dY of another dtype");
    return fails;
}

static int test_grad_bias(void) {
    int fails = 0;
    kiln_tensor *in[1] = {kt_make(KILN_F32, 4, KT_DIMS(2, 2, 1, 2),
                                  KT_VALS(1, 2, 3, 4, 5, 6, 7, 8))};
    kiln_tensor *want = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(14, 22));
    fails += kiln_optest("ConvGradBias", "", 1, in, 1, &want, 0, 0, "conv dB 2-D");
    in[0] = kt_make(KILN_F16, 3, KT_DIMS(1, 3, 2), KT_VALS(1, -2, 0.5, 0.25, 3, 3));
    want = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(-1, 0.75, 6));
    fails += kiln_optest("ConvGradBias", "", 1, in, 1, &want, 0, 0, "conv dB 1-D f16");
    in[0] = kt_make(KILN_I32, 3, KT_DIMS(1, 3, 2), NULL);
    fails += kiln_optest_fails("ConvGradBias", "", 1, in, 1, KILN_ERR_TYPE, "conv dB int32");
    return fails;
}
#endif /* KILN_OPTESTS */

/* A convolution's gradients take as many products as the convolution: every element of dy
 * (N, M, ...) meets C/group * prod(k) weights. */
static double grad_flops(const kiln_tensor *dy, const kiln_tensor *w) {
    if (!dy || !w || w->ndim < 1 || w->dims[0] <= 0) return 0;
    return 2.0 * (double)kiln_tensor_numel(dy) * (double)kiln_tensor_numel(w) / (double)w->dims[0];
}
static double grad_input_flops(const kiln_op_ctx *c) { return c->n_in > 2 ? grad_flops(c->in[0], c->in[1]) : 0; } /* (dy, W, x) */
static double grad_weight_flops(const kiln_op_ctx *c) { return c->n_in > 2 ? grad_flops(c->in[1], c->in[2]) : 0; } /* (x, dy, W) */

const kiln_op_def kiln_op_conv_grad_input = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_CONV_GRAD_INPUT, .flops = grad_input_flops,
    .name = "ConvGradInput", .domain = "kiln", .min_inputs = 3, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 1, .shape_only_inputs = 1u << 2, .infer = gi_infer,
    .cpu_forward = gi_forward, .cpu_workspace = gi_workspace, .test = KILN_OP_TESTS(test_grad_input),
};

const kiln_op_def kiln_op_conv_grad_weight = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_CONV_GRAD_WEIGHT, .flops = grad_weight_flops,
    .f32_inputs = 1u << 3 /* the prologue P */,
    .name = "ConvGradWeight", .domain = "kiln", .min_inputs = 3, .max_inputs = 4 /* the prologue */,
    .min_outputs = 1, .max_outputs = 1, .shape_only_inputs = 1u << 2, .infer = gw_infer,
    .cpu_forward = gw_forward, .cpu_workspace = gw_workspace, .test = KILN_OP_TESTS(test_grad_weight),
};

const kiln_op_def kiln_op_conv_grad_bias = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_CONV_GRAD_BIAS,
    .name = "ConvGradBias", .domain = "kiln", .min_inputs = 1, .max_inputs = 1,
    .min_outputs = 1, .max_outputs = 1, .infer = gb_infer, .cpu_forward = gb_forward,
    .test = KILN_OP_TESTS(test_grad_bias),
};
