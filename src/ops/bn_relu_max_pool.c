/*
 * bn_relu_max_pool.c — kiln.BnReluMaxPool(X, scale, B, S) -> Y, picks?: the MaxPool of a
 * training BatchNormalization -> Relu without that BN's output (issue 12; made by the
 * fuse-pool pass in training graphs, src/passes/fuse_pool.c, where the BN's Y has no other
 * reader):
 *   Z = Relu(round(x * a + b)),  a = scale / sqrt(var + epsilon),  b = B - mean * a
 *   Y, picks = MaxPool(Z) picks=1                     (src/ops/max_pool.h)
 * S (2, C) is the BN's saved batch statistics (its kiln output 3: row 0 the mean, row 1 the
 * population variance; any float dtype), scale and B (C) its parameters, epsilon its
 * attribute; round() to X's dtype as the BN writes Y (batch_normalization.h): Z is the BN's
 * Y with relu = 1 bit for bit on the same backend (the contract of the gradient's mask from
 * X; the CUDA kernels recompute it as the CUDA forward does, src/cuda/pool.cu), so Y and the
 * picks are the pool's over it. Relu maps NaN to 0. The pool's attributes (kernel_shape,
 * strides, pads, dilations, ceil_mode, auto_pad); float X (N, C, spatial 1..3); picks, when
 * asked, uint8 of Y's shape (fewer than 255 taps a window). The gradient is the pair's
 * (kiln.MaxPoolGrad with the picks, then kiln.BatchNormGrad with the mask from X): this op
 * has none of its own.
 * Why: ResNet's stem writes the BN's 112x112 output (411 MB at batch 256, fp16) only for
 * the pool to read it back; fused, X is read once and Z never written.
 */
#include "batch_normalization.h"
#include "max_pool.h"

#include "../core/optest.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool has_out(const kiln_op_ctx *c, int i) { return c->n_out > i && c->out[i] != NULL; }

static kiln_status check(kiln_op_ctx *c, kiln_window *w) {
    kiln_status st = kiln_pool_infer(c, false, kiln_attr_int(c->node, "ceil_mode", 0) != 0, w);
    if (st) return st;
    const kiln_tensor *x = c->in[0];
    const int64_t C = x->dims[1];
    for (int i = 1; i <= 3; i++) {
        const kiln_tensor *t = c->in[i];
        KILN_OP_CHECK(c, t && kiln_dtype_is_float(t->dtype), KILN_ERR_TYPE, "input %d (%s) must be a float tensor", i,
                      i == 1 ? "scale" : i == 2 ? "B" : "S");
        const int64_t want = i == 3 ? 2 * C : C;
        KILN_OP_CHECK(c, kiln_tensor_numel(t) == want && (i < 3 || (t->ndim == 2 && t->dims[0] == 2)), KILN_ERR_SHAPE,
                      "input %d (%s) must have %s for X's %lld channels", i, i == 1 ? "scale" : i == 2 ? "B" : "S",
                      i == 3 ? "shape (2, C)" : "C elements", (long long)C);
    }
    if (has_out(c, 1)) {
        const int64_t taps = w->k[0] * w->k[1] * w->k[2];
        KILN_OP_CHECK(c, taps < KILN_MAXPOOL_NO_PICK, KILN_ERR_UNSUPPORTED,
                      "the picks number a window's taps in a byte: %lld taps are too many", (long long)taps);
        kiln_tensor_set_shape(c->out[1], KILN_U8, c->out[0]->ndim, c->out[0]->dims);
    }
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    kiln_window w;
    return check(c, &w);
}

/* Z (X's dtype and shape), then the pool's staging */
static size_t z_bytes(const kiln_tensor *x) { return kiln_align64((size_t)kiln_tensor_numel(x) * kiln_dtype_size(x->dtype)); }

static size_t workspace(const kiln_op_ctx *c) {
    return z_bytes(c->in[0]) + kiln_max_pool_workspace(c->in[0], c->out[0]);
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_window w;
    kiln_status st = check(c, &w);
    if (st) return st;
    const kiln_tensor *x = c->in[0], *scale = c->in[1], *bias = c->in[2], *s = c->in[3];
    char *ws = c->workspace;
    kiln_tensor z = *x; /* the BN's Y with relu = 1 */
    z.data = ws;
    z.owns_data = false;
    ws += z_bytes(x);
    const int64_t N = x->dims[0], C = x->dims[1], S = kiln_tensor_numel(x) / (N * C > 0 ? N * C : 1);
    const double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    for (int64_t ch = 0; ch < C; ch++) {
        double a, b;
        kiln_bn_coef(kiln_get_f64(scale, ch), kiln_get_f64(bias, ch), kiln_get_f64(s, ch), kiln_get_f64(s, C + ch), eps,
                     &a, &b);
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = (n * C + ch) * S, e = i + S; i < e; i++) {
                const double v = kiln_bn_round_as(x->dtype, kiln_bn_affine(kiln_get_f64(x, i), a, b));
                kiln_set_f64(&z, i, v > 0 ? v : 0.0); /* NaN -> 0, as Relu */
            }
    }
    kiln_max_pool_run(&w, &z, c->out[0], NULL, false, has_out(c, 1) ? c->out[1]->data : NULL, ws);
    return KILN_OK;
}

/* ------------------------------------------------------------------- tests */

#ifdef KILN_OPTESTS
/* The pair it stands for on X (dims), random statistics' parameters: BatchNormalization
 * training_mode=1 relu=1 (Y, running statistics, S), then MaxPool picks=1 over Y; the fused
 * op on (X, scale, B, S) must give the pool's Y and picks bit for bit (a backend sweep case
 * too). X holds negatives and zeros after the affine (ReLU ties in every window). */
static int pair_case(kiln_dtype dt, int nd, const int64_t *dims, const char *pool_attrs, uint64_t seed,
                     const char *label) {
    const int64_t C = dims[1];
    kiln_tensor *in[5] = {kt_rand(dt, nd, dims, -2, 2, seed), kt_rand(KILN_F32, 1, &C, 0.5, 1.5, seed + 1),
                          kt_rand(KILN_F32, 1, &C, -0.5, 0.5, seed + 2), kt_rand(KILN_F32, 1, &C, -1, 1, seed + 3),
                          kt_rand(KILN_F32, 1, &C, 0.5, 2, seed + 4)};
    kiln_tensor *bn[4] = {NULL, NULL, NULL, NULL}, *pool[2] = {NULL, NULL};
    char attrs[200], pattrs[200];
    snprintf(attrs, sizeof attrs, "%s;epsilon=0.001", pool_attrs);
    snprintf(pattrs, sizeof pattrs, "%s;picks=1", pool_attrs);
    int fails = 0;
    if (!kiln_optest_eval("", "BatchNormalization", "training_mode=1;relu=1;epsilon=0.001", 15, 5, in, 4, bn, label) ||
        !kiln_optest_eval("", "MaxPool", pattrs, 12, 1, &bn[0], 2, pool, label)) {
        fails = 1;
    } else { /* (kiln_optest takes fin and pool) */
        kiln_tensor *fin[4] = {in[0], in[1], in[2], bn[3]};
        in[0] = in[1] = in[2] = bn[3] = NULL;
        fails += kiln_optest("BnReluMaxPool", attrs, 4, fin, 2, pool, 0, 0, label);
        pool[0] = pool[1] = NULL;
    }
    for (int i = 0; i < 5; i++) kiln_tensor_free(in[i]);
    for (int i = 0; i < 4; i++) kiln_tensor_free(bn[i]);
    kiln_tensor_free(pool[0]);
    kiln_tensor_free(pool[1]);
    return fails;
}

static int test(void) {
    int fails = 0;
    /* by hand: one channel, a = 2 / sqrt(3 + 1) = 1, b = 1 - 2 * 1 = -1: Z = Relu(x - 1) over
     * [0 3 2; 5 1 6; 2 2 0] = [0 2 1; 4 0 5; 1 1 0]; 2x2 windows at stride 1: maxima 4 (tap 2),
     * 5 (tap 3), 4 (tap 0), 5 (tap 1) */
    {
        kiln_tensor *in[4] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 3, 3), KT_VALS(0, 3, 2, 5, 1, 6, 2, 2, 0)),
                              kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(2)), kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(1)),
                              kt_make(KILN_F64, 2, KT_DIMS(2, 1), KT_VALS(2, 3))};
        kiln_tensor *want[2] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(4, 5, 4, 5)),
                                kt_make(KILN_U8, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(2, 3, 0, 1))};
        fails += kiln_optest("BnReluMaxPool", "kernel_shape=[2,2];epsilon=1.0", 4, in, 2, want, 0, 0,
                             "bn relu maxpool by hand");
    }
    {
        /* all of a window below zero: Relu's zeros tie, the first tap inside X takes it */
        kiln_tensor *in[4] = {kt_make(KILN_F32, 3, KT_DIMS(1, 1, 4), KT_VALS(-3, -1, -2, 7)),
                              kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(1)), kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(0)),
                              kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(0, 1))};
        kiln_tensor *want[2] = {kt_make(KILN_F32, 3, KT_DIMS(1, 1, 2), KT_VALS(0, 7)),
                                kt_make(KILN_U8, 3, KT_DIMS(1, 1, 2), KT_VALS(1, 2))};
        fails += kiln_optest("BnReluMaxPool", "kernel_shape=[3];strides=[2];pads=[1,1];epsilon=0.0", 4, in, 2, want,
                             1e-6, 0, "bn relu maxpool, ReLU's zeros tie");
    }
    /* the pair it stands for, bit for bit; the CUDA kernels' paths: f16 NHWC 16-byte channel
     * groups (16, 64 channels), f32 vectors (12), none (3); 3x3 s2 p1 (ResNet's stem), 2x2
     * s1, ceil_mode, 1-D */
    static const struct {
        kiln_dtype dt;
        int nd;
        int64_t dims[5];
        const char *attrs, *what;
    } cases[] = {
        {KILN_F32, 4, {2, 16, 11, 10}, "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", "bn relu maxpool 3x3 s2 p1, 16 ch"},
        {KILN_F16, 4, {2, 64, 9, 9}, "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", "bn relu maxpool f16 3x3 s2 p1, 64 ch"},
        {KILN_F32, 4, {1, 12, 9, 8}, "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", "bn relu maxpool 12 ch"},
        {KILN_F32, 4, {1, 3, 14, 12}, "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", "bn relu maxpool 3 ch"},
        {KILN_F32, 4, {2, 16, 8, 9}, "kernel_shape=[2,2]", "bn relu maxpool 2x2 s1, 16 ch"},
        {KILN_F32, 4, {1, 8, 10, 8}, "kernel_shape=[3,3];strides=[2,2];ceil_mode=1", "bn relu maxpool ceil_mode"},
        {KILN_F32, 3, {2, 3, 15}, "kernel_shape=[3];strides=[2];pads=[1,1]", "bn relu maxpool 1-D"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        fails += pair_case(cases[i].dt, cases[i].nd, cases[i].dims, cases[i].attrs, 4200 + 10 * i, cases[i].what);
    {
        kiln_tensor *in[4] = {kt_make(KILN_F32, 4, KT_DIMS(1, 2, 3, 3), NULL), kt_make(KILN_F32, 1, KT_DIMS(2), NULL),
                              kt_make(KILN_F32, 1, KT_DIMS(2), NULL), kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL)};
        fails += kiln_optest_fails("BnReluMaxPool", "kernel_shape=[2,2]", 4, in, 2, KILN_ERR_SHAPE,
                                   "bn relu maxpool with S of 3 channels for X's 2");
        in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 3, 3), NULL);
        in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
        in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
        in[3] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
        fails += kiln_optest_fails("BnReluMaxPool", "kernel_shape=[2,2]", 4, in, 2, KILN_ERR_SHAPE,
                                   "bn relu maxpool with 3 scales for 2 channels");
        in[0] = kt_make(KILN_I64, 4, KT_DIMS(1, 2, 3, 3), NULL);
        in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
        in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
        in[3] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
        fails += kiln_optest_fails("BnReluMaxPool", "kernel_shape=[2,2]", 4, in, 2, KILN_ERR_TYPE,
                                   "bn relu maxpool of an int64 X");
    }
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_bn_relu_max_pool = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_POOL,
    .name = "BnReluMaxPool", .domain = "kiln", .min_inputs = 4, .max_inputs = 4, .min_outputs = 1, .max_outputs = 2,
    .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test),
};
