/*
 * softmax.c — Softmax: y = exp(x - max) / sum(exp(x - max)).
 * Opset 13+: along the one dim `axis` (default -1). Opsets 11-12: over the input coerced
 * to 2-D at `axis` (default 1). Floats; see softmax_common.h.
 * Gradient: kiln.SoftmaxGrad(Y, dY) = Y * (dY - sum(dY * Y)) along the same rows.
 */
#include "../core/optest.h"
#include "softmax_common.h"

static kiln_status infer(kiln_op_ctx *c) { return kiln_softmax_infer(c); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_softmax_forward(c, false); }
static kiln_status grad(kiln_grad_ctx *g) { return kiln_softmax_grad_rule(g, "SoftmaxGrad"); }
static kiln_status infer_grad(kiln_op_ctx *c) { return kiln_softmax_grad_infer(c); }
static kiln_status forward_grad(kiln_op_ctx *c) { return kiln_softmax_grad_forward(c, false); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x, *y;
    /* expected values: numpy, exp(x - max) / sum in float64 */
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, -1, 0, 4));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 3),
                KT_VALS(0.09003057317038046, 0.24472847105479764, 0.6652409557748218,
                        0.00657326318530908, 0.0178679818703045, 0.9755587549443865));
    fails += kiln_optest("Softmax", "", 1, &x, 1, &y, 1e-7, 1e-6, "softmax default axis");

    /* a large offset must not overflow */
    x = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(10000, 10001, 10002));
    y = kt_make(KILN_F64, 2, KT_DIMS(1, 3),
                KT_VALS(0.09003057317038046, 0.24472847105479764, 0.6652409557748218));
    fails += kiln_optest("Softmax", "axis=1", 1, &x, 1, &y, 1e-15, 1e-13, "softmax large f64");

    x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, -1, 0, 4));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 3),
                KT_VALS(0.8807970779778823, 0.8807970779778823, 0.2689414213699951,
                        0.11920292202211755, 0.11920292202211755, 0.7310585786300049));
    fails += kiln_optest("Softmax", "axis=0", 1, &x, 1, &y, 1e-7, 1e-6, "softmax axis 0");

    /* x = 0.5 * arange(8) in (2,2,2): axis 1 alone (opset 13) vs coerced 2-D (opset 11) */
    x = kt_make(KILN_F16, 3, KT_DIMS(2, 2, 2), KT_VALS(0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5));
    y = kt_make(KILN_F16, 3, KT_DIMS(2, 2, 2),
                KT_VALS(0.2689414213699951, 0.2689414213699951, 0.7310585786300049,
                        0.7310585786300049, 0.2689414213699951, 0.2689414213699951,
                        0.7310585786300049, 0.7310585786300049));
    fails += kiln_optest("Softmax", "axis=1", 1, &x, 1, &y, 1e-3, 1e-3, "softmax axis 1 f16");
    x = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2), KT_VALS(0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5));
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2),
                KT_VALS(0.1015363240915518, 0.16740509727844333, 0.27600434470659363,
                        0.45505423392341127, 0.1015363240915518, 0.16740509727844333,
                        0.27600434470659363, 0.45505423392341127));
    fails += kiln_optest_opset("Softmax", "", 11, 1, &x, 1, &y, 1e-7, 1e-6,
                               "softmax opset 11 coerced 2-D");

    /* big enough for the threaded path: equal inputs give 1/1000 everywhere */
    x = kt_make(KILN_F32, 2, KT_DIMS(40, 1000), NULL);
    y = kt_make(KILN_F32, 2, KT_DIMS(40, 1000), NULL);
    for (int i = 0; i < 40000; i++) kiln_set_f64(y, i, 1e-3);
    fails += kiln_optest("Softmax", "", 1, &x, 1, &y, 1e-9, 1e-6, "softmax (40,1000) uniform");

    x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("Softmax", "axis=2", 1, &x, 1, KILN_ERR_SHAPE, "softmax bad axis");
    x = kt_make(KILN_I32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("Softmax", "", 1, &x, 1, KILN_ERR_TYPE, "softmax int input");

    /* gradients: single axis at opset 13 (last, middle, first) and coerced 2-D at 11 */
    fails += kiln_gradcheck("Softmax", "", 13, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -2, 2, 1)}, NULL,
                            "softmax grad axis -1");
    fails += kiln_gradcheck("Softmax", "axis=1", 13, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -2, 2, 2)}, NULL,
                            "softmax grad axis 1");
    fails += kiln_gradcheck("Softmax", "axis=0", 21, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 5), -2, 2, 3)}, NULL,
                            "softmax grad axis 0");
    fails += kiln_gradcheck("Softmax", "axis=1", 11, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -2, 2, 4)}, NULL,
                            "softmax grad opset 11 coerced at axis 1");
    fails += kiln_gradcheck("Softmax", "", 12, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 2, 3), -2, 2, 5)}, NULL,
                            "softmax grad opset 12 default axis");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Softmax", "axis=-1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 1037), -4, 4, 281)},
                               1, "softmax random rows of 1037");
    fails += kiln_optest_sweep("Softmax", "axis=1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -4, 4, 282)},
                               1, "softmax random axis 1 of 4-D");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Softmax", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 17), -2, 2, 1290)},
                               1, "softmax last axis");
    fails += kiln_optest_sweep("Softmax", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 300), -8, 8, 1291)},
                               1, "softmax long rows");
    fails += kiln_optest_sweep("Softmax", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 40), -50, 50, 1292)},
                               1, "softmax wide range");
    fails += kiln_optest_sweep("Softmax", "axis=1", 13, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 5, 7), -2, 2, 1293)},
                               1, "softmax middle axis");
    fails += kiln_optest_sweep("Softmax", "", 11, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 4), -2, 2, 1294)},
                               1, "softmax opset 11 coerced 2-D");
    fails += kiln_optest_sweep("Softmax", "axis=0", 11, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 4), -2, 2, 1295)},
                               1, "softmax opset 11 axis 0");
    fails += kiln_optest_sweep("Softmax", "axis=1", 13, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(64, 10), -3, 3, 3003)},
                               1, "softmax mnist shape");
    return fails;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[2], *dx;
    /* s = sum(dY * Y) = 0.2 - 0.5 = -0.3; dX = Y * (dY - s) */
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0.2, 0.3, 0.5));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 0, -1));
    dx = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0.26, 0.09, -0.35));
    fails += kiln_optest("SoftmaxGrad", "", 2, in, 1, &dx, 1e-7, 1e-6, "softmax grad one row");
    /* axis 0: columns; s = 2.5 and 0.8 */
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(0.25, 0.6, 0.75, 0.4));
    in[1] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, -1));
    dx = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(-0.375, 0.72, 0.375, -0.72));
    fails += kiln_optest("SoftmaxGrad", "axis=0", 2, in, 1, &dx, 1e-15, 1e-14, "softmax grad axis 0 f64");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("SoftmaxGrad", "", 2, in, 1, KILN_ERR_SHAPE, "softmax grad shape mismatch");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_softmax = {
    .precision = KILN_PREC_FP32,
    .name = "Softmax", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};

const kiln_op_def kiln_op_softmax_grad = {
    .precision = KILN_PREC_FP32,
    .name = "SoftmaxGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,
    .max_outputs = 1, .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};
