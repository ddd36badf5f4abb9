/*
 * log_softmax.c — LogSoftmax: y = x - max - log(sum(exp(x - max))).
 * Opset 13+: along the one dim `axis` (default -1). Opsets 11-12: over the input coerced
 * to 2-D at `axis` (default 1). Floats; see softmax_common.h.
 * Gradient: kiln.LogSoftmaxGrad(Y, dY) = dY - exp(Y) * sum(dY) along the same rows.
 */
#include "../core/optest.h"
#include "softmax_common.h"

static kiln_status infer(kiln_op_ctx *c) { return kiln_softmax_infer(c); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_softmax_forward(c, true); }
static kiln_status grad(kiln_grad_ctx *g) { return kiln_softmax_grad_rule(g, "LogSoftmaxGrad"); }
static kiln_status infer_grad(kiln_op_ctx *c) { return kiln_softmax_grad_infer(c); }
static kiln_status forward_grad(kiln_op_ctx *c) { return kiln_softmax_grad_forward(c, true); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x, *y;
    /* expected values: numpy, log(softmax) in float64 */
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, -1, 0, 4));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 3),
                KT_VALS(-2.40760596444438, -1.4076059644443804, -0.40760596444438046,
                        -5.024744890138822, -4.024744890138823, -0.02474489013882258));
    fails += kiln_optest("LogSoftmax", "", 1, &x, 1, &y, 1e-6, 1e-6, "logsoftmax default axis");

    /* with x ~ 1e4 the result still needs every bit of (x - max) */
    x = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(10000, 10001, 10002));
    y = kt_make(KILN_F64, 2, KT_DIMS(1, 3),
                KT_VALS(-2.40760596444438, -1.4076059644443804, -0.40760596444438046));
    fails += kiln_optest("LogSoftmax", "axis=-1", 1, &x, 1, &y, 1e-14, 1e-14,
                         "logsoftmax large f64");

    x = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2), KT_VALS(0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5));
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2),
                KT_VALS(-2.2873386716983295, -1.7873386716983295, -1.2873386716983295,
                        -0.7873386716983295, -2.2873386716983295, -1.7873386716983295,
                        -1.2873386716983295, -0.7873386716983295));
    fails += kiln_optest_opset("LogSoftmax", "axis=1", 12, 1, &x, 1, &y, 1e-6, 1e-6,
                               "logsoftmax opset 12 coerced 2-D");
    x = kt_make(KILN_BF16, 3, KT_DIMS(2, 2, 2), KT_VALS(0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5));
    y = kt_make(KILN_BF16, 3, KT_DIMS(2, 2, 2),
                KT_VALS(-1.3132616875182228, -1.3132616875182228, -0.31326168751822286,
                        -0.31326168751822286, -1.3132616875182228, -1.3132616875182228,
                        -0.31326168751822286, -0.31326168751822286));
    fails += kiln_optest("LogSoftmax", "axis=1", 1, &x, 1, &y, 1e-2, 1e-2,
                         "logsoftmax axis 1 bf16");

    x = kt_scalar(KILN_F32, 0);
    fails += kiln_optest_fails("LogSoftmax", "", 1, &x, 1, KILN_ERR_SHAPE,
                               "logsoftmax rank 0 has no axis");

    /* gradients: single axis at opset 13 (last, middle, first) and coerced 2-D at 11/12 */
    fails += kiln_gradcheck("LogSoftmax", "", 13, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -2, 2, 11)}, NULL,
                            "logsoftmax grad axis -1");
    fails += kiln_gradcheck("LogSoftmax", "axis=1", 13, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -2, 2, 12)}, NULL,
                            "logsoftmax grad axis 1");
    fails += kiln_gradcheck("LogSoftmax", "axis=0", 21, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 5), -2, 2, 13)}, NULL,
                            "logsoftmax grad axis 0");
    fails += kiln_gradcheck("LogSoftmax", "axis=1", 11, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -2, 2, 14)}, NULL,
                            "logsoftmax grad opset 11 coerced at axis 1");
    fails += kiln_gradcheck("LogSoftmax", "axis=-2", 12, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 2, 3), -2, 2, 15)}, NULL,
                            "logsoftmax grad opset 12 axis -2");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("LogSoftmax", "axis=-1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 1037), -4, 4, 281)},
                               1, "logsoftmax random rows of 1037");
    fails += kiln_optest_sweep("LogSoftmax", "axis=1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -4, 4, 282)},
                               1, "logsoftmax random axis 1 of 4-D");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("LogSoftmax", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 17), -2, 2, 1296)},
                               1, "logsoftmax last axis");
    fails += kiln_optest_sweep("LogSoftmax", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 300), -8, 8, 1297)},
                               1, "logsoftmax long rows");
    fails += kiln_optest_sweep("LogSoftmax", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 40), -50, 50, 1298)},
                               1, "logsoftmax wide range");
    fails += kiln_optest_sweep("LogSoftmax", "axis=1", 13, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 5, 7), -2, 2, 1299)},
                               1, "logsoftmax middle axis");
    fails += kiln_optest_sweep("LogSoftmax", "", 11, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 4), -2, 2, 1300)},
                               1, "logsoftmax opset 11 coerced 2-D");
    fails += kiln_optest_sweep("LogSoftmax", "axis=0", 11, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 4), -2, 2, 1301)},
                               1, "logsoftmax opset 11 axis 0");
    fails += kiln_optest_sweep("LogSoftmax", "axis=1", 13, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(64, 10), -3, 3, 3002)},
                               1, "logsoftmax mnist log_softmax");
    return fails;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[2], *dx;
    /* Y = log(0.2, 0.3, 0.5), dY = (1, 2, 0): sum(dY) = 3, dX = dY - 3 * exp(Y) */
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(-1.6094379124341003, -1.2039728043259361, -0.6931471805599453));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 0));
    dx = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0.4, 1.1, -1.5));
    fails += kiln_optest("LogSoftmaxGrad", "", 2, in, 1, &dx, 1e-6, 1e-6, "logsoftmax grad one row");
    /* coerced 2-D at opset 11, axis 1 of (2,1,2): each batch row of 2 is one softmax row */
    in[0] = kt_make(KILN_F64, 3, KT_DIMS(2, 1, 2), KT_VALS(-1.3862943611198906, -0.2876820724517809,
                                                          -0.6931471805599453, -0.6931471805599453));
    in[1] = kt_make(KILN_F64, 3, KT_DIMS(2, 1, 2), KT_VALS(1, 1, 2, -4));
    dx = kt_make(KILN_F64, 3, KT_DIMS(2, 1, 2), KT_VALS(0.5, -0.5, 3, -3));
    fails += kiln_optest_opset("LogSoftmaxGrad", "axis=1", 11, 2, in, 1, &dx, 1e-14, 1e-14,
                               "logsoftmax grad opset 11 coerced");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_log_softmax = {
    .precision = KILN_PREC_FP32,
    .name = "LogSoftmax", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};

const kiln_op_def kiln_op_log_softmax_grad = {
    .precision = KILN_PREC_FP32,
    .name = "LogSoftmaxGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1,
    .max_outputs = 1, .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};
