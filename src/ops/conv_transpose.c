/*
 * conv_transpose.c — ConvTranspose (opsets 11..21), the gradient of Conv with respect to
 * its input: every input pixel scatters W times its value into the output.
 *   X (N, C, D1..Dk), W (C, M/group, K1..Kk), optional B (M)  ->  Y (N, M, O1..Ok), k = 1..3.
 *   Attributes: kernel_shape (optional, must match W), strides, dilations, pads,
 *   output_padding, output_shape (spatial dims, or the full shape), auto_pad, group.
 *   Output size: O = s*(D-1) + output_padding + (K-1)*d + 1 - pad_begin - pad_end. With
 *   output_shape (or SAME_UPPER / SAME_LOWER, where O = D*s) the pads are derived from the
 *   total T = s*(D-1) + output_padding + (K-1)*d + 1 - O: SAME_UPPER puts the odd one at the
 *   end, NOTSET and SAME_LOWER at the beginning (the spec's formulas). A negative T (an
 *   output larger than the natural one) leaves the extra rows at the end, zero apart from
 *   the bias, as onnxruntime does and the ONNX test data expects.
 *   Dtypes: f32 and f64 through cblas_sgemm / cblas_dgemm; f16 / bf16 computed in f32.
 * Method: for each image n and group g,
 *   col (Mg*K, D) = W[g]^T (Mg*K, Cg) @ X[n, g] (Cg, D), then col2im adds col into Y[n, g]
 *   (pre-filled with the bias). The (n, g) jobs run side by side with OpenMP unless a few
 *   big products are better split one after the other (conv_common's grid2img).
 * Gradient (internal ops in domain "kiln", same attributes):
 *   ConvTransposeGradInput(dY, W, X) -> dX: W[g] @ im2col(dY[n, g]), a convolution;
 *   ConvTransposeGradWeight(X, dY, W) -> dW: sum over n of X[n, g] @ im2col(dY[n, g])^T;
 *   dB through kiln.ConvGradBias.
 */
#include "../core/optest.h"
#include "conv_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct convt_shape {
    kiln_conv_geom g; /* img: Y, grid: X, ci = M/group, cg = C/group */
    int64_t N, C, M, G, Cg, Mg;
} convt_shape;

/* Validate X, W, B (B may be NULL) and the attributes and compute the geometry; shared by
 * ConvTranspose and its gradient ops. */
static kiln_status shape_get(kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *w,
                             const kiln_tensor *b, convt_shape *s) {
    char xs[128], ws[128];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "X dtype %s is not supported (float dtypes only)", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, w->dtype == x->dtype && (!b || b->dtype == x->dtype), KILN_ERR_TYPE,
                  "W and B must have X's dtype %s", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 3, KILN_ERR_SHAPE,
                  "X must have rank >= 3 (N, C, spatial...), got rank %d", x->ndim);
    KILN_OP_CHECK(c, w->ndim == x->ndim, KILN_ERR_SHAPE,
                  "W %s must have X's rank %d (C, M/group, kernel...)",
                  kiln_shape_str(w, ws, sizeof ws), x->ndim);
    s->N = x->dims[0];
    s->C = x->dims[1];
    s->G = kiln_attr_int(c->node, "group", 1);
    KILN_OP_CHECK(c, s->G >= 1, KILN_ERR_SHAPE, "attribute group = %lld must be >= 1",
                  (long long)s->G);
    KILN_OP_CHECK(c, s->C % s->G == 0, KILN_ERR_SHAPE,
                  "group = %lld does not divide X's %lld channels", (long long)s->G,
                  (long long)s->C);
    KILN_OP_CHECK(c, w->dims[0] == s->C, KILN_ERR_SHAPE,
                  "channel mismatch: X %s has %lld channels but W %s has %lld (W dim 0 must "
                  "be X's channels)",
                  kiln_shape_str(x, xs, sizeof xs), (long long)s->C,
                  kiln_shape_str(w, ws, sizeof ws), (long long)w->dims[0]);
    s->Mg = w->dims[1];
    s->M = s->Mg * s->G;
    s->Cg = s->C / s->G;
    KILN_OP_CHECK(c, !b || (b->ndim == 1 && b->dims[0] == s->M), KILN_ERR_SHAPE,
                  "B must have shape (%lld), one value per output channel", (long long)s->M);

    const int nd = x->ndim - 2;
    kiln_auto_pad ap;
    kiln_status st = kiln_window_attrs(c, nd, w->dims + 2, &s->g.w, &ap);
    if (st != KILN_OK) return st;
    int64_t opad[KILN_WIN_MAX] = {0};
    int n_op = 0, n_os = 0;
    const int64_t *op = kiln_attr_ints(c->node, "output_padding", &n_op);
    const int64_t *os = kiln_attr_ints(c->node, "output_shape", &n_os);
    KILN_OP_CHECK(c, !op || n_op == nd, KILN_ERR_SHAPE,
                  "attribute output_padding has %d values, expected %d", n_op, nd);
    KILN_OP_CHECK(c, !os || n_os == nd || n_os == nd + 2, KILN_ERR_SHAPE,
                  "attribute output_shape has %d values, expected %d (or %d with N and C)", n_os,
                  nd, nd + 2);
    if (os) os += n_os - nd; /* the spatial part of a full shape */
    kiln_window *win = &s->g.w;
    for (int i = 0; i < nd; i++) {
        if (op) opad[i] = op[i];
        KILN_OP_CHECK(c, opad[i] >= 0, KILN_ERR_SHAPE, "output_padding[%d] = %lld is negative",
                      i, (long long)opad[i]);
        int t = KILN_WIN_SLOT(win, i);
        const int64_t in = x->dims[2 + i];
        /* bounds that keep the sizes below inside int64 (window attributes are <= 2^30) */
        const int64_t big = (int64_t)1 << 40;
        KILN_OP_CHECK(c, opad[i] <= big && (!os || (os[i] >= 0 && os[i] <= big)), KILN_ERR_SHAPE,
                      "spatial dim %d: output_padding or output_shape is above 2^40", i);
        KILN_OP_CHECK(c, in <= 1 || win->s[t] <= big / (in - 1), KILN_ERR_SHAPE,
                      "spatial dim %d: stride %lld over input %lld gives an output above 2^40", i,
                      (long long)win->s[t], (long long)in);
        const int64_t full = win->s[t] * (in - 1) + opad[i] + (win->k[t] - 1) * win->d[t] + 1;
        int64_t out;
        if (os || ap == KILN_PAD_SAME_UPPER || ap == KILN_PAD_SAME_LOWER) {
            out = os ? os[i] : in * win->s[t];
            int64_t total = full - out;
            if (total < 0) {
                win->pb[t] = 0;
                win->pe[t] = total;
            } else if (ap == KILN_PAD_SAME_UPPER) {
                win->pb[t] = total / 2;
                win->pe[t] = total - total / 2;
            } else {
                win->pb[t] = total - total / 2;
                win->pe[t] = total / 2;
            }
        } else {
            if (ap == KILN_PAD_VALID) win->pb[t] = win->pe[t] = 0;
            out = full - win->pb[t] - win->pe[t];
        }
        KILN_OP_CHECK(c, out >= 1 || (in == 0 && out >= 0), KILN_ERR_SHAPE,
                      "spatial dim %d: output size %lld (pads %lld+%lld) is not positive", i,
                      (long long)out, (long long)win->pb[t], (long long)win->pe[t]);
        win->grid[t] = in;
        win->img[t] = out;
    }
    s->g.N = s->N;
    s->g.G = s->G;
    s->g.ci = s->Mg;
    s->g.cg = s->Cg;
    kiln_conv_geom_finish(&s->g);
    KILN_OP_CHECK(c, kiln_blas_fits(s->Mg * s->g.K) && kiln_blas_fits(s->g.grid_n) &&
                         kiln_blas_fits(s->Cg),
                  KILN_ERR_UNSUPPORTED, "products of (%lld, %lld, %lld) exceed the BLAS int range",
                  (long long)(s->Mg * s->g.K), (long long)s->g.grid_n, (long long)s->Cg);
    return KILN_OK;
}

/* Y's dims (N, M, O1..Ok) for the geometry. */
static void y_dims(const convt_shape *s, int64_t *dims) {
    dims[0] = s->N;
    dims[1] = s->M;
    for (int i = 0; i < s->g.w.nd; i++) dims[2 + i] = s->g.w.img[KILN_WIN_SLOT(&s->g.w, i)];
}

static kiln_status infer(kiln_op_ctx *c) {
    convt_shape s;
    kiln_status st = shape_get(c, c->in[0], c->in[1], c->n_in > 2 ? c->in[2] : NULL, &s);
    if (st != KILN_OK) return st;
    int64_t dims[KILN_MAX_DIMS];
    y_dims(&s, dims);
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, c->in[0]->ndim, dims);
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) {
    kiln_op_ctx tmp = *c;
    convt_shape s;
    const kiln_tensor *b = c->n_in > 2 ? c->in[2] : NULL;
    if (shape_get(&tmp, c->in[0], c->in[1], b, &s) != KILN_OK) return 0;
    size_t stage = kiln_stage_size(c->in[0]) + kiln_stage_size(c->in[1]) + kiln_stage_size(b) +
                   kiln_stage_size(c->out[0]);
    return stage + kiln_conv_workspace(KILN_CONV_GRID2IMG, c->in[0]->dtype == KILN_F64, &s.g);
}

static size_t ws_left(const kiln_op_ctx *c, const char *ws) {
    return c->workspace_size - (size_t)(ws - (char *)c->workspace);
}

static kiln_status forward(kiln_op_ctx *c) {
    convt_shape s;
    const kiln_tensor *b = c->n_in > 2 ? c->in[2] : NULL;
    kiln_status st = shape_get(c, c->in[0], c->in[1], b, &s);
    if (st != KILN_OK) return st;
    char *ws = c->workspace;
    const void *X = kiln_stage_in(c->in[0], &ws);  // (N, C, I)
    const void *W = kiln_stage_in(c->in[1], &ws);  // (C, Mg, K)
    const void *B = kiln_stage_in(b, &ws);         // (M) or NULL
    void *Y = kiln_stage_out(c->out[0], &ws);      // (N, M, O)
    if (!kiln_conv_grid2img(c->in[0]->dtype == KILN_F64, &s.g, W, X, B, Y, ws, ws_left(c, ws)))
        return kiln_op_fail(c, KILN_ERR_INTERNAL, "workspace of %zu bytes is too small",
                            c->workspace_size);
    kiln_stage_finish(c->out[0], Y);
    return KILN_OK;
}

/* ------------------------------------------------------------------ gradient */

/* dL/dX = kiln.ConvTransposeGradInput(dY, W, X) (a convolution of dY with W), dL/dW =
 * kiln.ConvTransposeGradWeight(X, dY, W), dL/dB = kiln.ConvGradBias(dY). The grad ops
 * carry ConvTranspose's attributes and read only the shape of their last input. */
static kiln_status grad(kiln_grad_ctx *g) {
    const int x = KILN_GRAD_IN(g, 0), w = KILN_GRAD_IN(g, 1), dy = g->dy[0];
    if (g->need[0]) {
        g->dx[0] = kiln_grad_emit(g, "kiln", "ConvTransposeGradInput", 3, (int[]){dy, w, x}, 1,
                                  NULL, true, NULL);
        if (g->dx[0] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    if (g->need[1]) {
        g->dx[1] = kiln_grad_emit(g, "kiln", "ConvTransposeGradWeight", 3, (int[]){x, dy, w}, 1,
                                  NULL, true, NULL);
        if (g->dx[1] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    if (KILN_GRAD_NODE(g)->n_in > 2 && g->need[2]) {
        g->dx[2] = kiln_grad_emit(g, "kiln", "ConvGradBias", 1, &dy, 1, NULL, false, NULL);
        if (g->dx[2] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

/* The geometry of a grad op from X and W, checking that dY has the shape and dtype
 * ConvTranspose gives Y. */
static kiln_status grad_shape_get(kiln_op_ctx *c, const kiln_tensor *x, const kiln_tensor *w,
                                  const kiln_tensor *dy, convt_shape *s) {
    kiln_status st = shape_get(c, x, w, NULL, s);
    if (st != KILN_OK) return st;
    KILN_OP_CHECK(c, dy->dtype == x->dtype, KILN_ERR_TYPE, "dY must have X's dtype %s",
                  kiln_dtype_name(x->dtype));
    int64_t dims[KILN_MAX_DIMS];
    y_dims(s, dims);
    bool same = dy->ndim == x->ndim;
    for (int i = 0; same && i < dy->ndim; i++) same = dy->dims[i] == dims[i];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY must have ConvTranspose's output shape");
    return KILN_OK;
}

/* kiln.ConvTransposeGradInput(dY, W, X) -> dX: W @ im2col(dY) per image and group. */
static kiln_status gi_infer(kiln_op_ctx *c) {
    convt_shape s;
    kiln_status st = grad_shape_get(c, c->in[2], c->in[1], c->in[0], &s);
    if (st != KILN_OK) return st;
    kiln_tensor_set_shape(c->out[0], c->in[2]->dtype, c->in[2]->ndim, c->in[2]->dims);
    return KILN_OK;
}

static size_t gi_workspace(const kiln_op_ctx *c) {
    kiln_op_ctx tmp = *c;
    convt_shape s;
    if (grad_shape_get(&tmp, c->in[2], c->in[1], c->in[0], &s) != KILN_OK) return 0;
    size_t stage = kiln_stage_size(c->in[0]) + kiln_stage_size(c->in[1]) +
                   kiln_stage_size(c->out[0]);
    return stage + kiln_conv_workspace(KILN_CONV_IMG2GRID, c->in[0]->dtype == KILN_F64, &s.g);
}

static kiln_status gi_forward(kiln_op_ctx *c) {
    convt_shape s;
    kiln_status st = grad_shape_get(c, c->in[2], c->in[1], c->in[0], &s);
    if (st != KILN_OK) return st;
    char *ws = c->workspace;
    const void *dY = kiln_stage_in(c->in[0], &ws);  // (N, M, O)
    const void *W = kiln_stage_in(c->in[1], &ws);   // (C, Mg, K)
    void *dX = kiln_stage_out(c->out[0], &ws);      // (N, C, I)
    if (!kiln_conv_img2grid(c->in[0]->dtype == KILN_F64, &s.g, W, dY, NULL, dX, ws,
                            ws_left(c, ws)))
        return kiln_op_fail(c, KILN_ERR_INTERNAL, "workspace of %zu bytes is too small",
                            c->workspace_size);
    kiln_stage_finish(c->out[0], dX);
    return KILN_OK;
}

/* kiln.ConvTransposeGradWeight(X, dY, W) -> dW: sum over images of X @ im2col(dY)^T per
 * group. */
static kiln_status gw_infer(kiln_op_ctx *c) {
    convt_shape s;
    kiln_status st = grad_shape_get(c, c->in[0], c->in[2], c->in[1], &s);
    if (st != KILN_OK) return st;
    kiln_tensor_set_shape(c->out[0], c->in[2]->dtype, c->in[2]->ndim, c->in[2]->dims);
    return KILN_OK;
}

static size_t gw_workspace(const kiln_op_ctx *c) {
    kiln_op_ctx tmp = *c;
    convt_shape s;
    if (grad_shape_get(&tmp, c->in[0], c->in[2], c->in[1], &s) != KILN_OK) return 0;
    size_t stage = kiln_stage_size(c->in[0]) + kiln_stage_size(c->in[1]) +
                   kiln_stage_size(c->out[0]);
    return stage + kiln_conv_workspace(KILN_CONV_WGRAD, c->in[0]->dtype == KILN_F64, &s.g);
}

static kiln_status gw_forward(kiln_op_ctx *c) {
    convt_shape s;
    kiln_status st = grad_shape_get(c, c->in[0], c->in[2], c->in[1], &s);
    if (st != KILN_OK) return st;
    char *ws = c->workspace;
    const void *X = kiln_stage_in(c->in[0], &ws);   // (N, C, I)
    const void *dY = kiln_stage_in(c->in[1], &ws);  // (N, M, O)
    void *dW = kiln_stage_out(c->out[0], &ws);      // (C, Mg, K)
    if (!kiln_conv_weight_grad(c->in[0]->dtype == KILN_F64, &s.g, X, dY, dW, ws,
                               ws_left(c, ws)))
        return kiln_op_fail(c, KILN_ERR_INTERNAL, "workspace of %zu bytes is too small",
                            c->workspace_size);
    kiln_stage_finish(c->out[0], dW);
    return KILN_OK;
}

/* ------------------------------------------------------------------- tests */

/* A random case: values for the nd real dims only (s, d default to 1 when 0). */
typedef struct rand_convt {
    int nd;
    int64_t N, C, M, G;
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], op[3];
    bool bias;
} rand_convt;

#ifdef KILN_OPTESTS
/* The oracle for the BLAS paths: every input pixel scatters its products with W into the
 * full (unpadded) output, cropped by the pads, in double. x (N,C,in...), w (C,M/G,k...),
 * b (M) or NULL. Computes y (when non-NULL) and, from dy (when non-NULL), dx and dw
 * (zeroed tensors shaped like x and w). */
static void oracle(const rand_convt *p, const int64_t *out, const kiln_tensor *x,
                   const kiln_tensor *w, const kiln_tensor *b, kiln_tensor *y,
                   const kiln_tensor *dy, kiln_tensor *dx, kiln_tensor *dw) {
    const int nd = p->nd;
    int64_t O = 1, I = 1, K = 1;
    for (int i = 0; i < nd; i++) {
        O *= out[i];
        I *= p->in[i];
        K *= p->k[i];
    }
    double *acc = calloc((size_t)(p->N * p->M * O) + 1, sizeof(double));
    if (!acc) return;
    const int64_t Cg = p->C / p->G, Mg = p->M / p->G;
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t ch = 0; ch < p->C; ch++)
            for (int64_t q = 0; q < I; q++)
                for (int64_t mm = 0; mm < Mg; mm++)
                    for (int64_t kk = 0; kk < K; kk++) {
                        int64_t m = ch / Cg * Mg + mm, yi = n * p->M + m;
                        int64_t qrest = q, krest = kk, pos[3], tap[3];
                        for (int i = nd - 1; i >= 0; i--) {
                            pos[i] = qrest % p->in[i];
                            qrest /= p->in[i];
                            tap[i] = krest % p->k[i];
                            krest /= p->k[i];
                        }
                        bool inside = true;
                        for (int i = 0; i < nd; i++) {
                            int64_t at = pos[i] * (p->s[i] ? p->s[i] : 1) +
                                         tap[i] * (p->d[i] ? p->d[i] : 1) - p->pb[i];
                            inside = inside && at >= 0 && at < out[i];
                            yi = yi * out[i] + at;
                        }
                        if (!inside) continue;
                        const int64_t xi = (n * p->C + ch) * I + q, wi = (ch * Mg + mm) * K + kk;
                        const double xv = kiln_get_f64(x, xi), wv = kiln_get_f64(w, wi);
                        acc[yi] += xv * wv;
                        const double g = dy ? kiln_get_f64(dy, yi) : 0;
                        if (dx) kiln_set_f64(dx, xi, kiln_get_f64(dx, xi) + g * wv);
                        if (dw) kiln_set_f64(dw, wi, kiln_get_f64(dw, wi) + g * xv);
                    }
    for (int64_t i = 0; y && i < p->N * p->M * O; i++)
        kiln_set_f64(y, i, acc[i] + (b ? kiln_get_f64(b, i / O % p->M) : 0));
    free(acc);
}

/* Attribute text, X / W / Y dims and the kernel size of a random case. */
static void case_setup(const rand_convt *p, char *attrs, size_t size, int64_t *xd,
                       int64_t *wd, int64_t *yd, int64_t *K) {
    const int nd = p->nd;
    snprintf(attrs, size, "group=%lld", (long long)p->G);
    kiln_attr_text_ints(attrs, size, "strides", nd, p->s, NULL, 1);
    kiln_attr_text_ints(attrs, size, "dilations", nd, p->d, NULL, 1);
    kiln_attr_text_ints(attrs, size, "pads", nd, p->pb, p->pe, 0);
    kiln_attr_text_ints(attrs, size, "output_padding", nd, p->op, NULL, 0);
    xd[0] = yd[0] = p->N;
    xd[1] = wd[0] = p->C;
    wd[1] = p->M / p->G;
    yd[1] = p->M;
    *K = p->C / p->G;
    for (int i = 0; i < nd; i++) {
        int64_t s = p->s[i] ? p->s[i] : 1, d = p->d[i] ? p->d[i] : 1;
        yd[2 + i] = s * (p->in[i] - 1) + p->op[i] + (p->k[i] - 1) * d + 1 - p->pb[i] - p->pe[i];
        xd[2 + i] = p->in[i];
        wd[2 + i] = p->k[i];
        *K *= p->k[i];
    }
}

static int random_case(const char *label, const rand_convt *p, uint64_t seed) {
    const int nd = p->nd;
    char attrs[300];
    int64_t xd[5], wd[5], yd[5], K;
    case_setup(p, attrs, sizeof attrs, xd, wd, yd, &K);
    kiln_tensor *in[3] = {kt_rand(KILN_F32, 2 + nd, xd, -1, 1, seed),
                          kt_rand(KILN_F32, 2 + nd, wd, -1, 1, seed + 1),
                          p->bias ? kt_rand(KILN_F32, 1, KT_DIMS(p->M), -1, 1, seed + 2)
                                  : NULL};
    kiln_tensor *want = kt_make(KILN_F32, 2 + nd, yd, NULL);
    if (want) oracle(p, yd + 2, in[0], in[1], in[2], want, NULL, NULL, NULL);
    return kiln_optest("ConvTranspose", attrs, 3, in, 1, &want, 1e-6 * (double)K, 1e-5, label);
}

/* ConvTransposeGradInput (which 0) or ConvTransposeGradWeight (which 1) in f32 against
 * the oracle. */
static int random_grad_case(const char *label, const rand_convt *p, int which, uint64_t seed) {
    const int nd = p->nd;
    char attrs[300];
    int64_t xd[5], wd[5], yd[5], K;
    case_setup(p, attrs, sizeof attrs, xd, wd, yd, &K);
    kiln_tensor *x = kt_rand(KILN_F32, 2 + nd, xd, -1, 1, seed);
    kiln_tensor *w = kt_rand(KILN_F32, 2 + nd, wd, -1, 1, seed + 1);
    kiln_tensor *dy = kt_rand(KILN_F32, 2 + nd, yd, -1, 1, seed + 2);
    kiln_tensor *want = which ? kt_make(KILN_F32, 2 + nd, wd, NULL)
                              : kt_make(KILN_F32, 2 + nd, xd, NULL);
    if (x && w && dy && want)
        oracle(p, yd + 2, x, w, NULL, NULL, dy, which ? NULL : want, which ? want : NULL);
    /* dX sums up to M/G*K products, dW N*I of them */
    double terms = which ? (double)kiln_tensor_numel(x) / (double)p->C
                         : (double)(p->M / p->G * K / (p->C / p->G));
    if (which)
        return kiln_optest("ConvTransposeGradWeight", attrs, 3, (kiln_tensor *[]){x, dy, w}, 1,
                           &want, 1e-6 * terms, 1e-5, label);
    return kiln_optest("ConvTransposeGradInput", attrs, 3, (kiln_tensor *[]){dy, w, x}, 1,
                       &want, 1e-6 * terms, 1e-5, label);
}

/* Finite-difference check of ConvTranspose's gradient rule (f64). extra: attribute text
 * replacing pads and output_padding (output_shape, auto_pad). */
static int gradcheck_case(const char *label, const rand_convt *p, const char *extra,
                          uint64_t seed) {
    const int nd = p->nd;
    char attrs[300];
    int64_t xd[5], wd[5], yd[5], K;
    case_setup(p, attrs, sizeof attrs, xd, wd, yd, &K);
    if (extra) {
        snprintf(attrs, sizeof attrs, "group=%lld;%s", (long long)p->G, extra);
        kiln_attr_text_ints(attrs, sizeof attrs, "strides", nd, p->s, NULL, 1);
        kiln_attr_text_ints(attrs, sizeof attrs, "dilations", nd, p->d, NULL, 1);
    }
    kiln_tensor *in[3] = {kt_rand(KILN_F64, 2 + nd, xd, -1, 1, seed),
                          kt_rand(KILN_F64, 2 + nd, wd, -1, 1, seed + 1),
                          p->bias ? kt_rand(KILN_F64, 1, KT_DIMS(p->M), -1, 1, seed + 2)
                                  : NULL};
    return kiln_gradcheck("ConvTranspose", attrs, 0, 3, in, NULL, label);
}

static int test(void) {
    int fails = 0;
    /* Fixed cases. Expected values computed once with numpy (scatter into the full output,
     * then crop by the pads), cross-checked with onnx.reference where it handles the case. */
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 2, 3, 3), KT_VALS(-1, 3, 3, -1, -3, 1, 1, 2, 1, 2,
                3, 3, 3, 3, 2, 3, -3, -3)),
            kt_make(KILN_F32, 4, KT_DIMS(2, 2, 3, 3), KT_VALS(1, 0, 1, 0, 2, -2, 1, -2, -2, 2,
                -1, 2, -1, 1, 2, -1, 2, 1, 2, -1, 0, 1, 2, -1, 0, 1, 2, 2, -1, 2, -2, 2, 2,
                2, 2, 1)),
            kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0, 0)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 2, 7, 6), KT_VALS(2, 2, 3, 12, -6, 12, 4, 1, 11, -6,
                5, -5, 3, 4, 2, 0, 5, 6, 6, 2, 2, 12, 10, 3, 3, 8, -8, -2, -4, -4, 1, 1, 6,
                -7, -9, -5, 0, 0, 0, 0, 0, 0, -3, 3, -7, 9, 3, 9, 9, 0, 8, 12, 15, 9, -5, 5,
                1, 3, -5, 5, 15, 0, 17, 1, -3, 8, -7, 7, 12, -4, 3, -5, 5, 8, -4, -2, -8,
                -4, 0, 0, 0, 0, 0, 0)),
        };
        fails += kiln_optest("ConvTranspose", "strides=[2,2];pads=[1,0,0,1];output_padding=[1,0]",
                             3, in, 1, want, 0, 0,
                             "convtranspose 2-D strides pads output_padding bias");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 2, 4), KT_VALS(-3, 3, 3, -3, 1, -1, 2, 1)),
            kt_make(KILN_F32, 3, KT_DIMS(2, 1, 2), KT_VALS(0, 0, -2, 1)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 2, 6), KT_VALS(0, 0, 0, 0, 0, 0, -2, 2, -3, -3, 2,
                1)),
        };
        fails += kiln_optest("ConvTranspose", "dilations=[2];group=2", 2, in, 1, want, 0, 0,
                             "convtranspose 1-D dilated depthwise");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(3, -2, 0, -3, 0, -3, -1, 3, -3)),
            kt_make(KILN_F32, 4, KT_DIMS(1, 2, 3, 3), KT_VALS(-2, 1, -1, -2, -1, -2, 1, 0, 1, 1,
                -2, -2, 2, 1, 1, 2, -1, 0)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 4, KT_DIMS(1, 2, 10, 8), KT_VALS(-6, 3, 1, -2, 2, 0, 0, 0, -6, -3,
                -2, 2, 4, 0, 0, 0, 3, 0, 1, 0, -2, 0, 0, 0, 6, -3, 3, 0, 6, -3, 3, 0, 6, 3,
                6, 0, 6, 3, 6, 0, -3, 0, -3, 0, -3, 0, -3, 0, 2, -1, -5, 3, 3, -3, 3, 0, 2,
                1, -4, -3, 0, 3, 6, 0, -1, 0, 2, 0, 0, 0, -3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3,
                -6, -8, 4, 4, 0, 0, 0, 6, 3, -1, -2, -2, 0, 0, 0, 6, -3, -4, 2, 0, 0, 0, 0,
                -3, 6, 6, 0, -3, 6, 6, 0, -6, -3, -3, 0, -6, -3, -3, 0, -6, 3, 0, 0, -6, 3,
                0, 0, -1, 2, 5, -6, -9, 6, 6, 0, -2, -1, 5, 3, -3, -3, -3, 0, -2, 1, 6, -3,
                -6, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)),
        };
        fails += kiln_optest("ConvTranspose", "strides=[3,2];output_shape=[10,8]", 2, in, 1, want,
                             0, 0, "convtranspose output_shape larger than natural");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 3), KT_VALS(-2, -3, 1)),
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 3), KT_VALS(-1, 0, 2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 6), KT_VALS(0, -1, 0, -7, 0, 2)),
        };
        fails += kiln_optest("ConvTranspose", "strides=[2];output_shape=[6]", 2, in, 1, want, 0,
                             0, "convtranspose output_shape odd total");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 3), KT_VALS(-2, -3, 1)),
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 3), KT_VALS(-1, 0, 2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 6), KT_VALS(2, 0, -1, 0, -7, 0)),
        };
        fails += kiln_optest("ConvTranspose", "strides=[2];auto_pad=SAME_UPPER", 2, in, 1, want,
                             0, 0, "convtranspose SAME_UPPER");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 3), KT_VALS(-2, -3, 1)),
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 3), KT_VALS(-1, 0, 2)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 3, KT_DIMS(1, 1, 6), KT_VALS(0, -1, 0, -7, 0, 2)),
        };
        fails += kiln_optest("ConvTranspose", "strides=[2];auto_pad=SAME_LOWER", 2, in, 1, want,
                             0, 0, "convtranspose SAME_LOWER");
    }
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F64, 4, KT_DIMS(2, 1, 2, 3), KT_VALS(-0.661, 0.533, 0.345, 0.6, -0.561,
                0.446, -0.851, -0.985, -0.641, 0.564, 0.08, 0.233)),
            kt_make(KILN_F64, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(0.185, 0.272, -0.354, 0.441,
                -0.971, -0.246, -0.891, -0.748)),
            kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(0.5, -0.25)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F64, 4, KT_DIMS(2, 2, 3, 6), KT_VALS(0.377715, 0.320208, 0.598605,
                0.644976, 0.563825, 0.59384, 0.844994, 0.371699, 0.207533, 0.582461,
                0.46038, 0.773457, 0.2876, 0.7646, 0.698594, 0.252599, 0.342116, 0.696686,
                0.391831, -0.087394, -0.767543, -0.381118, -0.584995, -0.33487, -0.243649,
                0.096828, -0.180172, -0.510678, -0.990461, -0.617776, -0.7846, -0.6988,
                0.249851, 0.169628, -0.647386, -0.583608, 0.342565, 0.268528, 0.317775,
                0.23208, 0.381415, 0.325648, 0.905594, 0.278117, 0.86349, 0.087375,
                0.770019, 0.280695, 0.300344, 0.748724, 0.47168, 0.53528, 0.417518,
                0.602753, 0.576321, -0.040654, 0.706435, -0.00769, 0.372411, -0.092314,
                -0.039403, 0.247804, 0.549955, 0.4671, 0.094888, 0.17215, -0.752524,
                -0.671872, -0.32128, -0.30984, -0.457603, -0.424284)),
        };
        fails += kiln_optest("ConvTranspose", "strides=[1,2]", 3, in, 1, want, 1e-12, 0,
                             "convtranspose f64 batch 2");
    }
    {
        kiln_tensor *in[3] = {
            kt_make(KILN_F16, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(-2, -2, 3, -1, 1, -3, 2, 0)),
            kt_make(KILN_F16, 4, KT_DIMS(2, 1, 2, 2), KT_VALS(1, 2, 0, -2, 1, 0, 1, -2)),
            kt_make(KILN_F16, 1, KT_DIMS(1), KT_VALS(0)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F16, 4, KT_DIMS(1, 1, 4, 4), KT_VALS(-1, -4, -5, -4, 1, 2, -3, 10, 5,
                6, -1, -2, 2, -10, 0, 2)),
        };
        fails += kiln_optest("ConvTranspose", "strides=[2,2];kernel_shape=[2,2]", 3, in, 1, want,
                             0, 0, "convtranspose f16 kernel_shape");
    }
    {
        kiln_tensor *in[2] = {
            kt_make(KILN_F32, 5, KT_DIMS(1, 1, 2, 2, 2), KT_VALS(3, 0, -1, 0, -3, -1, 2, 1)),
            kt_make(KILN_F32, 5, KT_DIMS(1, 1, 2, 1, 2), KT_VALS(-1, 0, -2, 1)),
        };
        kiln_tensor *want[1] = {
            kt_make(KILN_F32, 5, KT_DIMS(1, 1, 3, 3, 3), KT_VALS(-3, 0, 0, 0, 0, 0, 1, 0, 0, -3,
                4, 0, 0, 0, 0, 0, -2, 0, 6, -1, -1, 0, 0, 0, -4, 0, 1)),
        };
        fails += kiln_optest("ConvTranspose", "strides=[1,2,1]", 2, in, 1, want, 0, 0,
                             "convtranspose 3-D");
    }

    /* BLAS path against the direct loop on random inputs. */
    fails += random_case("convtranspose random 2-D grouped, strides, dilations, pads",
                         &(rand_convt){.nd = 2, .N = 2, .C = 4, .M = 6, .G = 2, .in = {5, 6},
                                       .k = {3, 2}, .s = {2, 3}, .d = {1, 2}, .pb = {1, 0},
                                       .pe = {0, 2}, .op = {1, 0}, .bias = true},
                         71);
    fails += random_case("convtranspose random depthwise",
                         &(rand_convt){.nd = 2, .N = 2, .C = 6, .M = 6, .G = 6, .in = {7, 5},
                                       .k = {3, 3}, .s = {2, 2}, .pb = {1, 1}, .pe = {1, 1},
                                       .bias = true},
                         81);
    fails += random_case("convtranspose random large",
                         &(rand_convt){.nd = 2, .N = 1, .C = 32, .M = 16, .G = 1,
                                       .in = {24, 24}, .k = {4, 4}, .s = {2, 2}, .pb = {1, 1},
                                       .pe = {1, 1}},
                         91);
    fails += random_case("convtranspose random 1x1 (no col2im)",
                         &(rand_convt){.nd = 2, .N = 2, .C = 3, .M = 4, .G = 1, .in = {4, 5},
                                       .k = {1, 1}, .bias = true},
                         101);
    fails += random_case("convtranspose random 1-D",
                         &(rand_convt){.nd = 1, .N = 2, .C = 4, .M = 2, .G = 2, .in = {9},
                                       .k = {3}, .s = {3}, .d = {2}, .pb = {2}, .pe = {1},
                                       .op = {2}, .bias = true},
                         111);
    fails += random_case("convtranspose random 3-D",
                         &(rand_convt){.nd = 3, .N = 1, .C = 2, .M = 3, .G = 1, .in = {3, 4, 2},
                                       .k = {2, 3, 2}, .s = {2, 1, 2}, .pb = {0, 1, 1},
                                       .pe = {1, 1, 0}, .bias = true},
                         121);

    /* Gradient rule against finite differences. */
    fails += gradcheck_case("convtranspose grad 2-D grouped, strides, dilations, pads, "
                            "output_padding, bias",
                            &(rand_convt){.nd = 2, .N = 2, .C = 4, .M = 4, .G = 2, .in = {3, 4},
                                          .k = {3, 2}, .s = {2, 3}, .d = {1, 2}, .pb = {1, 0},
                                          .pe = {0, 2}, .op = {1, 0}, .bias = true},
                            NULL, 131);
    fails += gradcheck_case("convtranspose grad depthwise strides 2",
                            &(rand_convt){.nd = 2, .N = 1, .C = 3, .M = 3, .G = 3, .in = {3, 3},
                                          .k = {3, 3}, .s = {2, 2}, .pb = {1, 1}, .pe = {1, 1},
                                          .bias = true},
                            NULL, 132);
    fails += gradcheck_case("convtranspose grad 1-D, no bias",
                            &(rand_convt){.nd = 1, .N = 2, .C = 2, .M = 3, .G = 1, .in = {5},
                                          .k = {3}, .s = {2}, .d = {2}, .pb = {2}, .pe = {1},
                                          .op = {1}},
                            NULL, 133);
    fails += gradcheck_case("convtranspose grad output_shape larger than natural",
                            &(rand_convt){.nd = 2, .N = 1, .C = 2, .M = 2, .G = 1, .in = {3, 3},
                                          .k = {2, 2}, .s = {2, 2}, .bias = true},
                            "output_shape=[7,8]", 134);
    fails += gradcheck_case("convtranspose grad SAME_UPPER",
                            &(rand_convt){.nd = 2, .N = 1, .C = 2, .M = 2, .G = 1, .in = {3, 2},
                                          .k = {3, 3}, .s = {2, 2}},
                            "auto_pad=SAME_UPPER", 135);
    fails += gradcheck_case("convtranspose grad 1x1 (no col2im)",
                            &(rand_convt){.nd = 2, .N = 2, .C = 3, .M = 2, .G = 1, .in = {3, 4},
                                          .k = {1, 1}, .bias = true},
                            NULL, 136);

    /* errors */
    kiln_tensor *in[3];
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(2, 2, 3, 3), NULL);
    fails += kiln_optest_fails("ConvTranspose", "", 2, in, 1, KILN_ERR_SHAPE,
                               "convtranspose channel mismatch");
    /* an output_padding whose sum with the strided input overflowed int64 (undefined) */
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(3, 2, 3, 3), NULL);
    fails += kiln_optest_fails("ConvTranspose", "strides=[1073741824,1];output_padding=[9223372036854774784,0]", 2,
                               in, 1, KILN_ERR_SHAPE, "convtranspose output_padding overflowing int64");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(3, 2, 3, 3), NULL);
    fails += kiln_optest_fails("ConvTranspose", "group=2", 2, in, 1, KILN_ERR_SHAPE,
                               "convtranspose group does not divide C");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(2, 2, 3, 3), NULL);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("ConvTranspose", "group=2", 3, in, 1, KILN_ERR_SHAPE,
                               "convtranspose bias length");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    fails += kiln_optest_fails("ConvTranspose", "pads=[2,2,2,2]", 2, in, 1, KILN_ERR_SHAPE,
                               "convtranspose pads eat the output");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    fails += kiln_optest_fails("ConvTranspose", "output_shape=[4,4,4]", 2, in, 1,
                               KILN_ERR_SHAPE, "convtranspose output_shape count");
    return fails;
}
#endif /* KILN_OPTESTS */

/* Profile FLOPs: W (C, M/group, k...): each input element feeds M/group * prod(k) products. */
static double flops(const kiln_op_ctx *c) {
    const kiln_tensor *w = c->n_in > 1 ? c->in[1] : NULL;
    if (!c->in[0] || !w || w->ndim < 1 || w->dims[0] <= 0) return 0;
    return 2.0 * (double)kiln_tensor_numel(c->in[0]) * (double)kiln_tensor_numel(w) / (double)w->dims[0];
}

const kiln_op_def kiln_op_conv_transpose = {
    .precision = KILN_PREC_LOW, .flops = flops,
    .name = "ConvTranspose", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace,
    .test = KILN_OP_TESTS(test), .grad = grad,
};

/* Tiny cases for the grad ops. The 3x3 case by hand: ConvTranspose of a 2x2 X with a 2x2 W
 * gives a 3x3 Y, so dX[i,j] = sum over taps of dY[i+a, j+b] * W[a,b] and dW[a,b] = sum of
 * X[i,j] * dY[i+a, j+b]. The grouped case: a direct numpy loop over (n, c, pixel, m, tap)
 * accumulating dY*W into dX and X*dY into dW. */
#define GDY3 KT_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9)
#define GXG KT_VALS(-2, -2, 1, 0, 0, 1, 1, -2, 0, -2, 0, 2, 0, -2, 0, -2, 1, 2, 2, 1, 2, -1, \
    -2, 0)
#define GWG KT_VALS(0, 1, 2, -1, 2, -2, -1, 1, -1, 1, 0, 0, 2, 2, 2, 0, 2, 2, -2, -1, -1, 0, 2, \
    0, 2, -1, 2, 0, 1, -1, 0, 2, 2, 2, 2, -2, 1, 0, 1, -1, -2, -2, 2, 2, -1, 0, -1, -2)
#define GDYG KT_VALS(2, 1, -2, -1, 0, 2, 2, -1, 1, -2, -2, -1, 0, -1, 1, 0, -1, 2, 1, 1, 1, -1, \
    2, -2, -1, -2, -2, 2, -2, 0, 2, 1, 2, -2, 0, -2, -2, 2, -2, 0, -2, -1, 2, -1, -1, -2, 1, \
    -2, 0, -2, -2, 2, -2, 0, 0, -2, 1, 1, 2, -2, 2, -2, -2, 0, 2, 2, 1, -2, 0, 2, 0, -2)
#define GDXG_WANT KT_VALS(2, 6, -5, 3, -5, 5, 3, -1, -10, -1, 5, 12, 0, 0, -8, 16, -1, 0, -6, \
    2, -4, 2, 0, -2)
#define GDWG_WANT KT_VALS(2, 0, -7, 2, 2, 0, 4, 0, 0, 0, 6, 8, 6, 0, -2, 7, 4, 2, 2, -5, -4, 4, \
    3, 0, -4, 3, -11, 5, -6, 4, 4, 9, 6, -2, 0, 8, 4, 4, -6, 5, 2, 2, -2, -6, -4, -6, 1, -4)
#define GATTRS "strides=[2,1];pads=[1,0,0,1];output_padding=[1,0];group=2;kernel_shape=[2,2]"

#ifdef KILN_OPTESTS
static int test_grad_input(void) {
    int fails = 0;
    kiln_tensor *in[3] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), GDY3),
                          kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 2, 3, 4)),
                          kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL)};
    kiln_tensor *want = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(37, 47, 67, 77));
    fails += kiln_optest("ConvTransposeGradInput", "", 3, in, 1, &want, 0, 0,
                         "convtranspose dX 2x2 by hand");
    in[0] = kt_make(KILN_F64, 4, KT_DIMS(1, 6, 4, 3), GDYG);
    in[1] = kt_make(KILN_F64, 4, KT_DIMS(4, 3, 2, 2), GWG);
    in[2] = kt_make(KILN_F64, 4, KT_DIMS(1, 4, 2, 3), NULL);
    want = kt_make(KILN_F64, 4, KT_DIMS(1, 4, 2, 3), GDXG_WANT);
    fails += kiln_optest("ConvTransposeGradInput", GATTRS, 3, in, 1, &want, 0, 0,
                         "convtranspose dX grouped strides pads output_padding f64");
    fails += random_grad_case("convtranspose dX random depthwise",
                              &(rand_convt){.nd = 2, .N = 3, .C = 6, .M = 6, .G = 6,
                                            .in = {5, 6}, .k = {3, 3}, .s = {2, 2},
                                            .pb = {1, 1}, .pe = {1, 0}, .op = {1, 0}},
                              0, 141);
    fails += random_grad_case("convtranspose dX random large",
                              &(rand_convt){.nd = 2, .N = 3, .C = 32, .M = 32, .G = 1,
                                            .in = {12, 12}, .k = {4, 4}, .s = {2, 2},
                                            .pb = {1, 1}, .pe = {1, 1}},
                              0, 142);
    fails += random_grad_case("convtranspose dX random 1x1",
                              &(rand_convt){.nd = 2, .N = 2, .C = 3, .M = 4, .G = 1,
                                            .in = {4, 5}, .k = {1, 1}},
                              0, 143);
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[2] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    fails += kiln_optest_fails("ConvTransposeGradInput", "", 3, in, 1, KILN_ERR_SHAPE,
                               "convtranspose dX with dY of the wrong shape");
    return fails;
}

static int test_grad_weight(void) {
    int fails = 0;
    kiln_tensor *in[3] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 2, 3, 4)),
                          kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), GDY3),
                          kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL)};
    kiln_tensor *want = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(37, 47, 67, 77));
    fails += kiln_optest("ConvTransposeGradWeight", "", 3, in, 1, &want, 0, 0,
                         "convtranspose dW 2x2 by hand");
    in[0] = kt_make(KILN_F64, 4, KT_DIMS(1, 4, 2, 3), GXG);
    in[1] = kt_make(KILN_F64, 4, KT_DIMS(1, 6, 4, 3), GDYG);
    in[2] = kt_make(KILN_F64, 4, KT_DIMS(4, 3, 2, 2), NULL);
    want = kt_make(KILN_F64, 4, KT_DIMS(4, 3, 2, 2), GDWG_WANT);
    fails += kiln_optest("ConvTransposeGradWeight", GATTRS, 3, in, 1, &want, 0, 0,
                         "convtranspose dW grouped strides pads output_padding f64");
    fails += random_grad_case("convtranspose dW random batch 16 small products",
                              &(rand_convt){.nd = 2, .N = 16, .C = 4, .M = 2, .G = 1,
                                            .in = {5, 5}, .k = {3, 3}, .s = {2, 2}},
                              1, 151);
    fails += random_grad_case("convtranspose dW random large",
                              &(rand_convt){.nd = 2, .N = 2, .C = 32, .M = 32, .G = 1,
                                            .in = {12, 12}, .k = {4, 4}, .s = {2, 2},
                                            .pb = {1, 1}, .pe = {1, 1}},
                              1, 152);
    fails += random_grad_case("convtranspose dW random 1-D grouped",
                              &(rand_convt){.nd = 1, .N = 3, .C = 4, .M = 6, .G = 2,
                                            .in = {9}, .k = {3}, .s = {3}, .d = {2},
                                            .pb = {2}, .pe = {1}, .op = {2}},
                              1, 153);
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_conv_transpose_grad_input = {
    .precision = KILN_PREC_FP32,
    .name = "ConvTransposeGradInput", .domain = "kiln", .min_inputs = 3, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 1, .shape_only_inputs = 1u << 2, .infer = gi_infer,
    .cpu_forward = gi_forward, .cpu_workspace = gi_workspace, .test = KILN_OP_TESTS(test_grad_input),
};

const kiln_op_def kiln_op_conv_transpose_grad_weight = {
    .precision = KILN_PREC_FP32,
    .name = "ConvTransposeGradWeight", .domain = "kiln", .min_inputs = 3, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 1, .shape_only_inputs = 1u << 2, .infer = gw_infer,
    .cpu_forward = gw_forward, .cpu_workspace = gw_workspace, .test = KILN_OP_TESTS(test_grad_weight),
};
