/*
 * max_pool_dropout.c — MaxPool -> training Dropout as one internal op, and its gradient
 * chain as another (made by the fuse-pool pass, src/passes/fuse_pool.c; never reachable
 * from ONNX files).
 *
 * kiln.MaxPoolDropout(X, ratio?, training_mode?) -> Y, mask?
 *   Attributes: MaxPool's (kernel_shape, strides, pads, dilations, ceil_mode, auto_pad),
 *   Dropout's `seed` (optional) and dropout_opset (the Dropout node's opset, >= 12).
 *   Y, mask = Dropout(MaxPool(X), ratio, training_mode) exactly as the two ops compute
 *   them: the pooled values rounded to X's dtype, then Dropout's arithmetic on them, the
 *   mask drawn as for a Dropout node with this node's `seed` attribute and first output
 *   value (the pass keeps the Dropout's outputs, so the masks are bit for bit those of the
 *   unfused graph). X (N, C, spatial 1..3) float; Y and mask (bool) have the pool's
 *   output shape. No Indices.
 *
 * kiln.MaxPoolDropoutGrad(dY, X, mask, ratio?, training_mode?) -> dX
 *   Attributes: MaxPool's, and relu (0/1, default 0).
 *   g = kiln.DropoutGrad(dY, mask, ratio, training_mode), in dY's dtype;
 *   dX = kiln.MaxPoolGrad(g, X) (X is the pool's input); with relu = 1, then
 *   dX = kiln.UnaryGrad(dX, -, X) op=Relu: X > 0 ? dX : 0 (also where dX is NaN or inf),
 *   for a pool whose input is a Relu's output. Bit for bit the three ops in sequence, in
 *   f32, f64, f16 and bf16 (g is kept in dY's dtype, in the workspace, so it is rounded
 *   where the unfused graph rounds it). dY has the pool's output shape and X's dtype, the
 *   mask is bool of dY's shape; dX has X's shape.
 *
 * The arithmetic is the unfused ops' own code (dropout.h, max_pool.h,
 * kiln_unary_grad_apply), so the fused ops cannot drift from them. No gradient rules:
 * the ops are created after autograd.
 */
#include "../core/optest.h"
#include "dropout.h"
#include "max_pool.h"
#include "unary.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kiln_tensor *opt_in(const kiln_op_ctx *c, int i) { return i < c->n_in ? c->in[i] : NULL; }

static bool same_dims(const kiln_tensor *a, const kiln_tensor *b) {
    return a->ndim == b->ndim && memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

/* ------------------------------------------------------------------- forward */

/* The window and the output shapes; the checks of both infer and forward. */
static kiln_status check(kiln_op_ctx *c, kiln_window *w) {
    const int64_t opset = kiln_attr_int(c->node, "dropout_opset", 0);
    KILN_OP_CHECK(c, opset >= 12, KILN_ERR_INVALID_ARGUMENT,
                  "attribute dropout_opset = %lld: the fused Dropout must be of opset 12 or later (inputs ratio and "
                  "training_mode)", (long long)opset);
    kiln_status st = kiln_pool_infer(c, false, kiln_attr_int(c->node, "ceil_mode", 0) != 0, w);
    if (!st) st = kiln_dropout_check_args(c, opt_in(c, 1), opt_in(c, 2));
    if (st) return st;
    if (c->n_out > 1 && c->out[1]) kiln_tensor_set_shape(c->out[1], KILN_BOOL, c->out[0]->ndim, c->out[0]->dims);
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    kiln_window w;
    return check(c, &w);
}

static size_t workspace(const kiln_op_ctx *c) { return kiln_max_pool_workspace(c->in[0], c->out[0]); }

/* The pool into Y, then Dropout on Y in place: Dropout reads the pooled values in Y's
 * dtype, as it reads MaxPool's output in the unfused graph. */
static kiln_status forward(kiln_op_ctx *c) {
    kiln_window w;
    kiln_status st = check(c, &w);
    if (st) return st;
    kiln_tensor *y = c->out[0];
    kiln_max_pool_run(&w, c->in[0], y, NULL, false, NULL, c->workspace);
    double ratio;
    bool train;
    kiln_dropout_mode(opt_in(c, 1), opt_in(c, 2), &ratio, &train);
    return kiln_dropout_apply(c, y, y, c->n_out > 1 && c->out[1] ? c->out[1]->data : NULL, ratio, train);
}

/* ------------------------------------------------------------------ backward */

static kiln_status grad_check(kiln_op_ctx *c, kiln_window *w) {
    const int64_t relu = kiln_attr_int(c->node, "relu", 0);
    KILN_OP_CHECK(c, relu == 0 || relu == 1, KILN_ERR_INVALID_ARGUMENT, "attribute relu = %lld must be 0 or 1",
                  (long long)relu);
    /* dY (N, C, grid...) of X's float dtype, X (N, C, img...); dX X's shape */
    kiln_status st = kiln_pool_grad_infer(c, kiln_attr_int(c->node, "ceil_mode", 0) != 0, w);
    if (st) return st;
    const kiln_tensor *dy = c->in[0], *mask = c->in[2];
    char ms[128], ds[128];
    KILN_OP_CHECK(c, mask->dtype == KILN_BOOL && same_dims(mask, dy), KILN_ERR_SHAPE,
                  "mask %s must be bool of dY's shape %s", kiln_shape_str(mask, ms, sizeof ms),
                  kiln_shape_str(dy, ds, sizeof ds));
    return kiln_dropout_check_args(c, opt_in(c, 3), opt_in(c, 4));
}

static kiln_status grad_infer(kiln_op_ctx *c) {
    kiln_window w;
    return grad_check(c, &w);
}

/* g (dY's dtype and shape), then MaxPoolGrad's staging. */
static size_t g_bytes(const kiln_tensor *dy) {
    return kiln_align64((size_t)kiln_tensor_numel(dy) * kiln_dtype_size(dy->dtype));
}

static size_t grad_workspace(const kiln_op_ctx *c) {
    return g_bytes(c->in[0]) + kiln_max_pool_grad_workspace(c->in[0], c->in[1], c->out[0]);
}

static kiln_status grad_forward(kiln_op_ctx *c) {
    kiln_window w;
    kiln_status st = grad_check(c, &w);
    if (st) return st;
    const kiln_tensor *dy = c->in[0], *x = c->in[1];
    kiln_tensor *dx = c->out[0];
    char *ws = c->workspace;
    kiln_tensor g = *dy; // (N, C, grid...) in dY's dtype: what kiln.DropoutGrad writes
    g.data = ws;
    g.owns_data = false;
    ws += g_bytes(dy);
    double ratio;
    bool train;
    kiln_dropout_mode(opt_in(c, 3), opt_in(c, 4), &ratio, &train);
    st = kiln_dropout_grad_apply(c, dy, c->in[2]->data, &g, ratio, train);
    if (st) return st;
    kiln_max_pool_grad_run(&w, &g, x, NULL, dx, ws);
    if (kiln_attr_int(c->node, "relu", 0)) {
        /* Relu's derivative reads its output Y, which is the pool's X */
        const kiln_op_def *relu = kiln_op_find("Relu");
        const kiln_unary_grad_def *gd = relu ? relu->family : NULL;
        if (!gd) return kiln_op_fail(c, KILN_ERR_INTERNAL, "Relu's derivative is not registered");
        const kiln_unary_args a = {0};
        kiln_unary_grad_apply(gd, &a, dx, NULL, x, dx);
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------- tests */

#ifdef KILN_OPTESTS
/* The 4x4 image of the hand-checked cases, and its 2x2 windows (kernel 2, stride 2):
 *   (0,0) {1 3 3 0}      max 3, a tie: the first, index 1
 *   (0,1) {-2 -1 -3 -5}  max -1 at index 3 (a negative maximum: Relu's gradient is 0)
 *   (1,0) {NaN 2 5 1}    NaN wins, at index 8
 *   (1,1) {4 4 4 0}      max 4, a tie: the first, index 10 */
static kiln_tensor *hand_x(kiln_dtype dt) {
    return kt_make(dt, 4, KT_DIMS(1, 1, 4, 4), KT_VALS(1, 3, -2, -1, 3, 0, -3, -5, NAN, 2, 4, 4, 5, 1, 4, 0));
}

static const char *const POOL2 = "kernel_shape=[2,2];strides=[2,2];dropout_opset=13";

static int test_hand_forward(void) {
    int fails = 0;
    kiln_tensor *in[5], *out[2];
    /* training_mode false: the plain pool, every mask bit set */
    in[0] = hand_x(KILN_F32);
    in[1] = kt_scalar(KILN_F32, 0.5);
    in[2] = kt_scalar(KILN_BOOL, 0);
    out[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(3, -1, NAN, 4));
    out[1] = kt_make(KILN_BOOL, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 1, 1, 1));
    fails += kiln_optest("MaxPoolDropout", POOL2, 3, in, 2, out, 0, 0,
                         "maxpool-dropout training_mode false: the pool (tie, NaN)");
    /* training with ratio 0: the same */
    in[0] = hand_x(KILN_F16);
    in[1] = kt_scalar(KILN_F32, 0);
    in[2] = kt_scalar(KILN_BOOL, 1);
    out[0] = kt_make(KILN_F16, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(3, -1, NAN, 4));
    out[1] = kt_make(KILN_BOOL, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 1, 1, 1));
    fails += kiln_optest("MaxPoolDropout", POOL2, 3, in, 2, out, 0, 0, "maxpool-dropout training ratio 0 f16");
    /* no training_mode input (inference form), no mask output */
    in[0] = hand_x(KILN_F64);
    out[0] = kt_make(KILN_F64, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(3, -1, NAN, 4));
    fails += kiln_optest("MaxPoolDropout", POOL2, 1, in, 1, out, 0, 0, "maxpool-dropout without training_mode f64");

    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    fails += kiln_optest_fails("MaxPoolDropout", "kernel_shape=[2,2];dropout_opset=10", 1, in, 1,
                               KILN_ERR_INVALID_ARGUMENT, "maxpool-dropout of a Dropout-10");
    in[0] = kt_make(KILN_I8, 4, KT_DIMS(1, 1, 4, 4), NULL);
    fails += kiln_optest_fails("MaxPoolDropout", POOL2, 1, in, 1, KILN_ERR_TYPE, "maxpool-dropout int8 X");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("MaxPoolDropout", POOL2, 2, in, 1, KILN_ERR_SHAPE, "maxpool-dropout ratio not a scalar");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    in[1] = kt_scalar(KILN_F32, 1);
    in[2] = kt_scalar(KILN_BOOL, 1);
    fails += kiln_optest_fails("MaxPoolDropout", POOL2, 3, in, 2, KILN_ERR_INVALID_ARGUMENT,
                               "maxpool-dropout training ratio 1");
    return fails;
}

static int test_hand_grad(void) {
    int fails = 0;
    kiln_tensor *in[5], *out[1];
    /* dY (1 2 3 4), ratio 0.75 (scale 4); g = dY * 4 where the mask is set, routed
     * to indices 1, 3, 8 and 10; with relu, 3 (X = -1) and 8 (X = NaN) give 0 */
    static const struct {
        const char *label, *attrs;
        kiln_dtype dt;
        double mask[4];
        bool train;
        double dx[16];
    } gc[] = {
        {"maxpool-dropout grad, all kept", "kernel_shape=[2,2];strides=[2,2]", KILN_F32, {1, 1, 1, 1}, true,
         {0, 4, 0, 8, 0, 0, 0, 0, 12, 0, 16, 0, 0, 0, 0, 0}},
        {"maxpool-dropout grad relu: negative maximum and NaN give 0", "kernel_shape=[2,2];strides=[2,2];relu=1",
         KILN_F32, {1, 1, 1, 1}, true, {0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0}},
        {"maxpool-dropout grad relu, one dropped f16", "kernel_shape=[2,2];strides=[2,2];relu=1", KILN_F16,
         {1, 1, 1, 0}, true, {0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
        {"maxpool-dropout grad training_mode false: MaxPoolGrad of dY bf16", "kernel_shape=[2,2];strides=[2,2]",
         KILN_BF16, {0, 0, 1, 0}, false, {0, 1, 0, 2, 0, 0, 0, 0, 3, 0, 4, 0, 0, 0, 0, 0}},
    };
    for (size_t i = 0; i < sizeof gc / sizeof gc[0]; i++) {
        in[0] = kt_make(gc[i].dt, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 2, 3, 4));
        in[1] = hand_x(gc[i].dt);
        in[2] = kt_make(KILN_BOOL, 4, KT_DIMS(1, 1, 2, 2), gc[i].mask);
        in[3] = kt_scalar(KILN_F32, 0.75);
        in[4] = kt_scalar(KILN_BOOL, gc[i].train);
        out[0] = kt_make(gc[i].dt, 4, KT_DIMS(1, 1, 4, 4), gc[i].dx);
        fails += kiln_optest("MaxPoolDropoutGrad", gc[i].attrs, 5, in, 1, out, 0, 0, gc[i].label);
    }

    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 3), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    in[2] = kt_make(KILN_BOOL, 4, KT_DIMS(1, 1, 2, 3), NULL);
    fails += kiln_optest_fails("MaxPoolDropoutGrad", "kernel_shape=[2,2];strides=[2,2]", 3, in, 1, KILN_ERR_SHAPE,
                               "maxpool-dropout grad dY not of the pool's output shape");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    in[2] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    fails += kiln_optest_fails("MaxPoolDropoutGrad", "kernel_shape=[2,2];strides=[2,2]", 3, in, 1, KILN_ERR_SHAPE,
                               "maxpool-dropout grad float mask");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    in[2] = kt_make(KILN_BOOL, 4, KT_DIMS(1, 4, 1, 1), NULL);
    fails += kiln_optest_fails("MaxPoolDropoutGrad", "kernel_shape=[2,2];strides=[2,2]", 3, in, 1, KILN_ERR_SHAPE,
                               "maxpool-dropout grad mask of dY's size but another shape");
    in[0] = kt_make(KILN_F16, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    in[2] = kt_make(KILN_BOOL, 4, KT_DIMS(1, 1, 2, 2), NULL);
    fails += kiln_optest_fails("MaxPoolDropoutGrad", "kernel_shape=[2,2];strides=[2,2]", 3, in, 1, KILN_ERR_TYPE,
                               "maxpool-dropout grad dY f16, X f32");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), NULL);
    in[2] = kt_make(KILN_BOOL, 4, KT_DIMS(1, 1, 2, 2), NULL);
    fails += kiln_optest_fails("MaxPoolDropoutGrad", "kernel_shape=[2,2];strides=[2,2];relu=2", 3, in, 1,
                               KILN_ERR_INVALID_ARGUMENT, "maxpool-dropout grad relu=2");
    return fails;
}

/* Random cases against the unfused ops' references in sequence, with the same node keys
 * and run seed: forward Dropout(MaxPool(X)), backward UnaryGrad(MaxPoolGrad(DropoutGrad(dY,
 * mask), X), -, X) with the forward's mask. */
static int test_random(void) {
    static const struct {
        const char *pool;
        int ndim;
        int64_t dims[5];
    } shapes[] = {
        {"kernel_shape=[2,2];strides=[2,2]", 4, {2, 3, 6, 8}},                 /* mnist-net's pool */
        {"kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1]", 4, {1, 2, 7, 6}},   /* overlapping windows */
        {"kernel_shape=[2,3];strides=[2,2];pads=[0,1,1,0];ceil_mode=1", 4, {2, 2, 5, 6}},
        {"kernel_shape=[3];strides=[2];auto_pad=SAME_UPPER", 3, {2, 3, 9}},
        {"kernel_shape=[2,2,2];strides=[1,2,1];dilations=[2,1,1]", 5, {1, 2, 4, 4, 3}},
    };
    static const kiln_dtype dts[] = {KILN_F32, KILN_F16, KILN_F64, KILN_BF16};
    int fails = 0;
    uint64_t rs = 900;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
            for (int relu = 0; relu < 2; relu++) {
                const kiln_dtype dt = dts[d];
                char label[200], fattrs[160], gattrs[160];
                snprintf(label, sizeof label, "maxpool-dropout %s %s%s vs the unfused ops", shapes[s].pool,
                         kiln_dtype_name(dt), relu ? " relu" : "");
                snprintf(fattrs, sizeof fattrs, "%s;seed=%d;dropout_opset=13", shapes[s].pool, 5 + relu);
                snprintf(gattrs, sizeof gattrs, "%s;relu=%d", shapes[s].pool, relu);
                const double ratio = relu ? 0.3 : 0.5;
                /* ties within windows in f16 / bf16 at this range: the first maximum is
                 * exercised too */
                kiln_tensor *x = kt_rand(dt, shapes[s].ndim, shapes[s].dims, -1, 1, rs++);
                kiln_tensor *r = kt_scalar(KILN_F32, ratio), *t = kt_scalar(KILN_BOOL, 1);
                kiln_tensor *p[1] = {0}, *ref[2] = {0}, *got[2] = {0}, *g[1] = {0}, *dp[1] = {0}, *dx_ref[1] = {0},
                            *dx[1] = {0}, *dy = NULL;
                bool ok = x && r && t &&
                          kiln_optest_eval("", "MaxPool", shapes[s].pool, 21, 1, (kiln_tensor *[]){x}, 1, p, label) &&
                          kiln_optest_eval("", "Dropout", relu ? "seed=6" : "seed=5", 13, 3, (kiln_tensor *[]){p[0], r, t}, 2, ref,
                               label) &&
                          kiln_optest_eval("kiln", "MaxPoolDropout", fattrs, 1, 3, (kiln_tensor *[]){x, r, t}, 2, got, label);
                if (ok) {
                    fails += kiln_tensor_same_bits(got[0], ref[0], label);
                    fails += kiln_tensor_same_bits(got[1], ref[1], label);
                    /* a mask with kept and dropped elements, so the check can fail */
                    const bool *mk = ref[1]->data;
                    int64_t kept = 0, n = kiln_tensor_numel(ref[1]);
                    for (int64_t i = 0; i < n; i++) kept += mk[i];
                    if (kept == 0 || kept == n) {
                        printf("FAIL %s: degenerate mask (%lld of %lld kept)\n", label, (long long)kept, (long long)n);
                        fails++;
                    }
                    dy = kt_rand(dt, ref[0]->ndim, ref[0]->dims, -2, 2, rs++);
                    ok = dy && kiln_optest_eval("kiln", "DropoutGrad", "", 1, 4, (kiln_tensor *[]){dy, ref[1], r, t}, 1, g, label) &&
                         kiln_optest_eval("kiln", "MaxPoolGrad", shapes[s].pool, 1, 2, (kiln_tensor *[]){g[0], x}, 1, dp, label) &&
                         (!relu || kiln_optest_eval("kiln", "UnaryGrad", "op=Relu", 1, 3, (kiln_tensor *[]){dp[0], NULL, x}, 1,
                                        dx_ref, label)) &&
                         kiln_optest_eval("kiln", "MaxPoolDropoutGrad", gattrs, 1, 5, (kiln_tensor *[]){dy, x, ref[1], r, t}, 1, dx,
                              label);
                    if (ok) {
                        char gl[220];
                        snprintf(gl, sizeof gl, "%s, backward", label);
                        fails += kiln_tensor_same_bits(dx[0], relu ? dx_ref[0] : dp[0], gl);
                    }
                }
                fails += !ok;
                kiln_tensor_free(x);
                kiln_tensor_free(r);
                kiln_tensor_free(t);
                kiln_tensor_free(dy);
                kiln_tensor_free(p[0]);
                kiln_tensor_free(g[0]);
                kiln_tensor_free(dp[0]);
                kiln_tensor_free(dx_ref[0]);
                kiln_tensor_free(dx[0]);
                for (int k = 0; k < 2; k++) {
                    kiln_tensor_free(ref[k]);
                    kiln_tensor_free(got[k]);
                }
            }
    return fails;
}

static int test(void) { return test_hand_forward() + test_random(); }
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_max_pool_dropout = {
    .precision = KILN_PREC_FP32, .random = true,
    .name = "MaxPoolDropout", .domain = "kiln", .min_inputs = 1, .max_inputs = 3, .min_outputs = 1,
    .max_outputs = 2, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test),
};

/* (the random cases of the backward run with the forward's: they need its masks) */
const kiln_op_def kiln_op_max_pool_dropout_grad = {
    .precision = KILN_PREC_FP32,
    .name = "MaxPoolDropoutGrad", .domain = "kiln", .min_inputs = 3, .max_inputs = 5, .min_outputs = 1,
    .max_outputs = 1, .infer = grad_infer, .cpu_forward = grad_forward, .cpu_workspace = grad_workspace,
    .test = KILN_OP_TESTS(test_hand_grad),
};
