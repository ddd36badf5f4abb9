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
 *   (pre-filled with the bias). The (n, g) jobs run in parallel with OpenMP only when one
 *   product is too small for OpenBLAS to thread.
 */
#include "../core/optest.h"
#include "conv_common.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct convt_shape {
    kiln_window w; /* img: Y's spatial dims; grid: X's */
    int64_t N, C, M, G, Cg, Mg, K, I /* X elements per channel */, O /* Y's */;
} convt_shape;

static kiln_status shape_get(kiln_op_ctx *c, convt_shape *s) {
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
    kiln_status st = kiln_window_attrs(c, nd, w->dims + 2, &s->w, &ap);
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
    for (int i = 0; i < nd; i++) {
        if (op) opad[i] = op[i];
        KILN_OP_CHECK(c, opad[i] >= 0, KILN_ERR_SHAPE, "output_padding[%d] = %lld is negative",
                      i, (long long)opad[i]);
        int t = KILN_WIN_SLOT(&s->w, i);
        const int64_t in = x->dims[2 + i];
        const int64_t full = s->w.s[t] * (in - 1) + opad[i] + (s->w.k[t] - 1) * s->w.d[t] + 1;
        int64_t out;
        if (os || ap == KILN_PAD_SAME_UPPER || ap == KILN_PAD_SAME_LOWER) {
            out = os ? os[i] : in * s->w.s[t];
            int64_t total = full - out;
            if (total < 0) {
                s->w.pb[t] = 0;
                s->w.pe[t] = total;
            } else if (ap == KILN_PAD_SAME_UPPER) {
                s->w.pb[t] = total / 2;
                s->w.pe[t] = total - total / 2;
            } else {
                s->w.pb[t] = total - total / 2;
                s->w.pe[t] = total / 2;
            }
        } else {
            if (ap == KILN_PAD_VALID) s->w.pb[t] = s->w.pe[t] = 0;
            out = full - s->w.pb[t] - s->w.pe[t];
        }
        KILN_OP_CHECK(c, out >= 1 || (in == 0 && out >= 0), KILN_ERR_SHAPE,
                      "spatial dim %d: output size %lld (pads %lld+%lld) is not positive", i,
                      (long long)out, (long long)s->w.pb[t], (long long)s->w.pe[t]);
        s->w.grid[t] = in;
        s->w.img[t] = out;
    }
    s->K = s->w.k[0] * s->w.k[1] * s->w.k[2];
    s->I = s->w.grid[0] * s->w.grid[1] * s->w.grid[2];
    s->O = s->w.img[0] * s->w.img[1] * s->w.img[2];
    KILN_OP_CHECK(c, kiln_blas_fits(s->Mg * s->K) && kiln_blas_fits(s->I) &&
                         kiln_blas_fits(s->Cg),
                  KILN_ERR_UNSUPPORTED, "products of (%lld, %lld, %lld) exceed the BLAS int range",
                  (long long)(s->Mg * s->K), (long long)s->I, (long long)s->Cg);
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    convt_shape s;
    kiln_status st = shape_get(c, &s);
    if (st != KILN_OK) return st;
    int64_t dims[KILN_MAX_DIMS] = {s.N, s.M};
    for (int i = 0; i < s.w.nd; i++) dims[2 + i] = s.w.img[KILN_WIN_SLOT(&s.w, i)];
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, c->in[0]->ndim, dims);
    return KILN_OK;
}

/* Bytes of one col buffer (0 when the product can be written into Y directly). */
static size_t col_bytes(const convt_shape *s, bool dbl) {
    if (kiln_window_is_identity(&s->w)) return 0;
    return kiln_align64((size_t)(s->Mg * s->K * s->I) * (dbl ? sizeof(double) : sizeof(float)));
}

static size_t workspace(const kiln_op_ctx *c) {
    kiln_op_ctx tmp = *c;
    convt_shape s;
    if (shape_get(&tmp, &s) != KILN_OK) return 0;
    bool dbl = c->in[0]->dtype == KILN_F64;
    int nt = kiln_gemm_job_threads(s.N * s.G, s.Mg * s.K, s.I, s.Cg);
    size_t stage = kiln_stage_size(c->in[0]) + kiln_stage_size(c->in[1]) +
                   (c->n_in > 2 ? kiln_stage_size(c->in[2]) : 0) + kiln_stage_size(c->out[0]);
    return stage + (size_t)nt * col_bytes(&s, dbl);
}

static kiln_status forward(kiln_op_ctx *c) {
    convt_shape s;
    kiln_status st = shape_get(c, &s);
    if (st != KILN_OK) return st;
    const bool dbl = c->in[0]->dtype == KILN_F64;
    const size_t esz = dbl ? sizeof(double) : sizeof(float);
    char *ws = c->workspace;
    const char *X = kiln_stage_in(c->in[0], &ws);                        // (N, C, I)
    const char *W = kiln_stage_in(c->in[1], &ws);                        // (C, Mg, K)
    const char *B = kiln_stage_in(c->n_in > 2 ? c->in[2] : NULL, &ws);   // (M) or NULL
    char *Y = kiln_stage_out(c->out[0], &ws);                            // (N, M, O)
    char *col = ws;                                                      // nt x (Mg*K, I)
    const size_t cb = col_bytes(&s, dbl);
    const size_t left = c->workspace_size - (size_t)(ws - (char *)c->workspace);
    const int64_t MgK = s.Mg * s.K, jobs = s.N * s.G;
    int nt = kiln_gemm_job_threads(jobs, MgK, s.I, s.Cg);
    if (cb && (size_t)nt > left / cb) nt = (int)(left / cb);
    if (cb && nt < 1)
        return kiln_op_fail(c, KILN_ERR_INTERNAL, "workspace of %zu bytes is too small",
                            c->workspace_size);

#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int64_t j = 0; j < jobs; j++) {
        const int64_t n = j / s.G, g = j % s.G;
        const char *xg = X + (size_t)((n * s.C + g * s.Cg) * s.I) * esz;  // (Cg, I)
        const char *wg = W + (size_t)(g * s.Cg * MgK) * esz;              // (Cg, Mg*K)
        char *yg = Y + (size_t)((n * s.M + g * s.Mg) * s.O) * esz;        // (Mg, O)
        if (B) kiln_fill_rows(dbl, yg, s.Mg, s.O, B + (size_t)(g * s.Mg) * esz);
        else memset(yg, 0, (size_t)(s.Mg * s.O) * esz);
        if (!cb) {
            /* 1x1, unit strides, no pads: col is Y[n, g] itself. */
            kiln_gemm(dbl, true, false, MgK, s.I, s.Cg, 1.0, wg, MgK, xg, s.I, 1.0, yg, s.I);
            continue;
        }
        char *mycol = col + (size_t)omp_get_thread_num() * cb;
        kiln_gemm(dbl, true, false, MgK, s.I, s.Cg, 1.0, wg, MgK, xg, s.I, 0.0, mycol, s.I);
        kiln_col2im(dbl, &s.w, s.Mg, mycol, yg);
    }
    kiln_stage_finish(c->out[0], Y);
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

/* The oracle for the BLAS path: every input pixel scatters its products with W into the
 * full (unpadded) output, which is then cropped by the pads, in double. */
static kiln_tensor *direct(const rand_convt *p, const int64_t *out, const kiln_tensor *x,
                           const kiln_tensor *w, const kiln_tensor *b) {
    const int nd = p->nd;
    int64_t ydims[5] = {p->N, p->M}, O = 1, I = 1, K = 1;
    for (int i = 0; i < nd; i++) {
        ydims[2 + i] = out[i];
        O *= out[i];
        I *= p->in[i];
        K *= p->k[i];
    }
    kiln_tensor *y = kt_make(KILN_F32, 2 + nd, ydims, NULL);
    if (!y) return NULL;
    double *acc = calloc((size_t)(p->N * p->M * O), sizeof(double));
    if (!acc) return y;
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
                        if (inside)
                            acc[yi] += kiln_get_f64(x, (n * p->C + ch) * I + q) *
                                       kiln_get_f64(w, (ch * Mg + mm) * K + kk);
                    }
    for (int64_t i = 0; i < p->N * p->M * O; i++)
        kiln_set_f64(y, i, acc[i] + (b ? kiln_get_f64(b, i / O % p->M) : 0));
    free(acc);
    return y;
}

static int random_case(const char *label, const rand_convt *p, uint64_t seed) {
    const int nd = p->nd;
    char attrs[300];
    snprintf(attrs, sizeof attrs, "group=%lld", (long long)p->G);
    kiln_attr_text_ints(attrs, sizeof attrs, "strides", nd, p->s, NULL, 1);
    kiln_attr_text_ints(attrs, sizeof attrs, "dilations", nd, p->d, NULL, 1);
    kiln_attr_text_ints(attrs, sizeof attrs, "pads", nd, p->pb, p->pe, 0);
    kiln_attr_text_ints(attrs, sizeof attrs, "output_padding", nd, p->op, NULL, 0);
    int64_t xd[5] = {p->N, p->C}, wd[5] = {p->C, p->M / p->G}, out[3], K = p->C / p->G;
    for (int i = 0; i < nd; i++) {
        int64_t s = p->s[i] ? p->s[i] : 1, d = p->d[i] ? p->d[i] : 1;
        out[i] = s * (p->in[i] - 1) + p->op[i] + (p->k[i] - 1) * d + 1 - p->pb[i] - p->pe[i];
        xd[2 + i] = p->in[i];
        wd[2 + i] = p->k[i];
        K *= p->k[i];
    }
    kiln_tensor *in[3] = {kt_rand(KILN_F32, 2 + nd, xd, -1, 1, seed),
                          kt_rand(KILN_F32, 2 + nd, wd, -1, 1, seed + 1),
                          p->bias ? kt_rand(KILN_F32, 1, KT_DIMS(p->M), -1, 1, seed + 2)
                                  : NULL};
    kiln_tensor *want = direct(p, out, in[0], in[1], in[2]);
    return kiln_optest("ConvTranspose", attrs, 3, in, 1, &want, 1e-6 * (double)K, 1e-5, label);
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

    /* errors */
    kiln_tensor *in[3];
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 3, 5, 5), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(2, 2, 3, 3), NULL);
    fails += kiln_optest_fails("ConvTranspose", "", 2, in, 1, KILN_ERR_SHAPE,
                               "convtranspose channel mismatch");
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

const kiln_op_def kiln_op_conv_transpose = {
    .name = "ConvTranspose", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace,
    .test = test,
};
