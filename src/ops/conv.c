/*
 * conv.c — Conv (opsets 11..21): Y = conv(X, W) + B.
 *   X (N, C, D1..Dk), W (M, C/group, K1..Kk), optional B (M)  ->  Y (N, M, O1..Ok), k = 1..3.
 *   Attributes: kernel_shape (optional, must match W), strides, dilations, pads, auto_pad
 *   (NOTSET, SAME_UPPER, SAME_LOWER, VALID), group (grouped and depthwise convolutions).
 *   Dtypes: f32 and f64 through cblas_sgemm / cblas_dgemm; f16 and bf16 are converted to
 *   f32 in the workspace, computed there and rounded back.
 * Method: for each image n and group g, im2col of X[n, g] into the workspace, then
 *   Y[n, g] (Mg, O) = W[g] (Mg, Cg*K) @ col (Cg*K, O), with Y pre-filled by the bias.
 *   1x1 kernels with unit strides and no pads use X[n, g] as col directly. When one product
 *   is too small for OpenBLAS to thread (depthwise, small images), the (n, g) jobs run in
 *   parallel with OpenMP, each thread with its own col buffer; otherwise they run in turn
 *   and OpenBLAS threads each product.
 */
#include "../core/optest.h"
#include "conv_common.h"

#include <omp.h>
#include <stdio.h>

typedef struct conv_shape {
    kiln_window w;
    int64_t N, C, M, G, Cg, Mg;
    int64_t K;  /* kernel elements per channel (K1*...*Kk) */
    int64_t I;  /* image elements per channel */
    int64_t O;  /* output elements per channel */
} conv_shape;

/* Validate inputs and attributes and compute the geometry. Used by infer, workspace sizing
 * and forward, so all three agree. */
static kiln_status conv_shape_get(kiln_op_ctx *c, conv_shape *s) {
    const kiln_tensor *x = c->in[0], *w = c->in[1];
    const kiln_tensor *b = c->n_in > 2 ? c->in[2] : NULL;
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
    kiln_status st = kiln_window_forward(c, x, w->dims + 2, false, &s->w);
    if (st != KILN_OK) return st;
    s->Cg = s->C / s->G;
    s->Mg = s->M / s->G;
    s->K = s->w.k[0] * s->w.k[1] * s->w.k[2];
    s->I = s->w.img[0] * s->w.img[1] * s->w.img[2];
    s->O = s->w.grid[0] * s->w.grid[1] * s->w.grid[2];
    KILN_OP_CHECK(c, kiln_blas_fits(s->Mg) && kiln_blas_fits(s->O) &&
                         kiln_blas_fits(s->Cg * s->K),
                  KILN_ERR_UNSUPPORTED, "products of (%lld, %lld, %lld) exceed the BLAS int range",
                  (long long)s->Mg, (long long)s->O, (long long)(s->Cg * s->K));
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    conv_shape s;
    kiln_status st = conv_shape_get(c, &s);
    if (st != KILN_OK) return st;
    int64_t dims[KILN_MAX_DIMS] = {s.N, s.M};
    for (int i = 0; i < s.w.nd; i++) dims[2 + i] = s.w.grid[KILN_WIN_SLOT(&s.w, i)];
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, c->in[0]->ndim, dims);
    return KILN_OK;
}

/* Bytes of one col buffer (0 when im2col is skipped). */
static size_t col_bytes(const conv_shape *s, bool dbl) {
    if (kiln_window_is_identity(&s->w)) return 0;
    return kiln_align64((size_t)(s->Cg * s->K * s->O) * (dbl ? sizeof(double) : sizeof(float)));
}

static size_t workspace(const kiln_op_ctx *c) {
    kiln_op_ctx tmp = *c;
    conv_shape s;
    if (conv_shape_get(&tmp, &s) != KILN_OK) return 0;
    bool dbl = c->in[0]->dtype == KILN_F64;
    int nt = kiln_gemm_job_threads(s.N * s.G, s.Mg, s.O, s.Cg * s.K);
    size_t stage = kiln_stage_size(c->in[0]) + kiln_stage_size(c->in[1]) +
                   (c->n_in > 2 ? kiln_stage_size(c->in[2]) : 0) + kiln_stage_size(c->out[0]);
    return stage + (size_t)nt * col_bytes(&s, dbl);
}

static kiln_status forward(kiln_op_ctx *c) {
    conv_shape s;
    kiln_status st = conv_shape_get(c, &s);
    if (st != KILN_OK) return st;
    const bool dbl = c->in[0]->dtype == KILN_F64;
    const size_t esz = dbl ? sizeof(double) : sizeof(float);
    char *ws = c->workspace;
    const char *X = kiln_stage_in(c->in[0], &ws);                        // (N, C, I)
    const char *W = kiln_stage_in(c->in[1], &ws);                        // (M, Cg, K)
    const char *B = kiln_stage_in(c->n_in > 2 ? c->in[2] : NULL, &ws);   // (M) or NULL
    char *Y = kiln_stage_out(c->out[0], &ws);                            // (N, M, O)
    char *col = ws;                                                      // nt x (Cg*K, O)
    const size_t cb = col_bytes(&s, dbl);
    const size_t left = c->workspace_size - (size_t)(ws - (char *)c->workspace);
    int nt = kiln_gemm_job_threads(s.N * s.G, s.Mg, s.O, s.Cg * s.K);
    if (cb && (size_t)nt > left / cb) nt = (int)(left / cb);
    if (cb && nt < 1)
        return kiln_op_fail(c, KILN_ERR_INTERNAL, "workspace of %zu bytes is too small",
                            c->workspace_size);
    const int64_t jobs = s.N * s.G, CgK = s.Cg * s.K;

#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t j = 0; j < jobs; j++) {
        const int64_t n = j / s.G, g = j % s.G;
        const char *xg = X + (size_t)((n * s.C + g * s.Cg) * s.I) * esz;  // (Cg, I)
        char *yg = Y + (size_t)((n * s.M + g * s.Mg) * s.O) * esz;        // (Mg, O)
        const void *src = xg;
        if (cb) {
            char *mycol = col + (size_t)omp_get_thread_num() * cb;
            kiln_im2col(dbl, &s.w, s.Cg, xg, mycol);
            src = mycol;
        }
        if (B) kiln_fill_rows(dbl, yg, s.Mg, s.O, B + (size_t)(g * s.Mg) * esz);
        kiln_gemm(dbl, false, false, s.Mg, s.O, CgK, 1.0, W + (size_t)(g * s.Mg * CgK) * esz,
                  CgK, src, s.O, B ? 1.0 : 0.0, yg, s.O);
    }
    kiln_stage_finish(c->out[0], Y);
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

/* The oracle for the BLAS path: a direct loop over outputs, input channels and kernel
 * taps in double. x (N,C,in...), w (M,C/G,k...), b (M) or NULL. */
static kiln_tensor *direct(const rand_conv *p, const int64_t *out, const kiln_tensor *x,
                           const kiln_tensor *w, const kiln_tensor *b) {
    const int nd = p->nd;
    int64_t ydims[5] = {p->N, p->M}, O = 1, K = 1;
    for (int i = 0; i < nd; i++) {
        ydims[2 + i] = out[i];
        O *= out[i];
        K *= p->k[i];
    }
    kiln_tensor *y = kt_make(KILN_F32, 2 + nd, ydims, NULL);
    if (!y) return NULL;
    const int64_t Cg = p->C / p->G, Mg = p->M / p->G;
    for (int64_t n = 0; n < p->N; n++)
        for (int64_t m = 0; m < p->M; m++)
            for (int64_t o = 0; o < O; o++) {
                double acc = b ? kiln_get_f64(b, m) : 0;
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
                        if (inside) acc += kiln_get_f64(x, xi) * kiln_get_f64(w, wi);
                    }
                kiln_set_f64(y, (n * p->M + m) * O + o, acc);
            }
    return y;
}

static int random_case(const char *label, const rand_conv *p, uint64_t seed) {
    const int nd = p->nd;
    char attrs[256];
    snprintf(attrs, sizeof attrs, "group=%lld", (long long)p->G);
    kiln_attr_text_ints(attrs, sizeof attrs, "strides", nd, p->s, NULL, 1);
    kiln_attr_text_ints(attrs, sizeof attrs, "dilations", nd, p->d, NULL, 1);
    kiln_attr_text_ints(attrs, sizeof attrs, "pads", nd, p->pb, p->pe, 0);
    int64_t xd[5] = {p->N, p->C}, wd[5] = {p->M, p->C / p->G}, out[3], K = p->C / p->G;
    for (int i = 0; i < nd; i++) {
        int64_t s = p->s[i] ? p->s[i] : 1, d = p->d[i] ? p->d[i] : 1;
        out[i] = (p->in[i] + p->pb[i] + p->pe[i] - ((p->k[i] - 1) * d + 1)) / s + 1;
        xd[2 + i] = p->in[i];
        wd[2 + i] = p->k[i];
        K *= p->k[i];
    }
    kiln_tensor *in[3] = {kt_rand(KILN_F32, 2 + nd, xd, -1, 1, seed),
                          kt_rand(KILN_F32, 2 + nd, wd, -1, 1, seed + 1),
                          p->bias ? kt_rand(KILN_F32, 1, KT_DIMS(p->M), -1, 1, seed + 2)
                                  : NULL};
    kiln_tensor *want = direct(p, out, in[0], in[1], in[2]);
    /* f32 sums of K products of values in [-1, 1): error grows like sqrt(K) ulps. */
    return kiln_optest("Conv", attrs, 3, in, 1, &want, 1e-6 * (double)K, 1e-5, label);
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
    /* One product big enough for OpenBLAS to thread it: jobs run in turn. */
    fails += random_case("conv random large",
                         &(rand_conv){.nd = 2, .N = 2, .C = 16, .M = 32, .G = 1, .in = {32, 32},
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

    /* errors */
    kiln_tensor *in[3];
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(4, 2, 3, 3), NULL);
    fails += kiln_optest_fails("Conv", "", 2, in, 1, KILN_ERR_SHAPE, "conv channel mismatch");
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
    return fails;
}

const kiln_op_def kiln_op_conv = {
    .name = "Conv", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = test,
};
