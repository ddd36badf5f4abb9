/* sigmoid.c — Sigmoid: y = 1 / (1 + exp(-x)). Float dtypes; opsets 6 and 13 (bf16).
 * exp is only ever taken of a non-positive argument, so very negative x gives the
 * tiny positive result (down to subnormals) instead of 1 / (1 + inf) = 0.
 * Gradient: dY * Y * (1 - Y), read from Y. */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double sigmoid(double x, const kiln_unary_args *a) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, sigmoid, NULL, NULL); }

static double deriv(double x, double y, const kiln_unary_args *a) { return y * (1 - y); }
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_Y, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-20, -1, 0, 0.5, 1, 20));
    kiln_tensor *y = kt_make(KILN_F32, 2, KT_DIMS(2, 3),
                             KT_VALS(2.06115369e-09, 0.268941432, 0.5, 0.622459352, 0.731058598, 1));
    fails += kiln_optest("Sigmoid", "", 1, &x, 1, &y, 1e-7, 1e-6, "sigmoid f32");
    /* -720: exp(720) overflows double, the careful form still gives exp(-720) */
    x = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(-720, -30, 0, 2, 720));
    y = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(2.0322308024183599e-313, 9.3576229688393001e-14,
                                                 0.5, 0.88079707797788231, 1));
    fails += kiln_optest("Sigmoid", "", 1, &x, 1, &y, 0, 1e-9, "sigmoid f64 extremes");
    x = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(-3, 0, 2));
    y = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(0.0474258736, 0.5, 0.880797088));
    fails += kiln_optest("Sigmoid", "", 1, &x, 1, &y, 0, 1e-3, "sigmoid f16");
    x = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("Sigmoid", "", 1, &x, 1, KILN_ERR_TYPE, "sigmoid rejects i64");
    fails += kiln_gradcheck("Sigmoid", "", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -3, 3, 1)},
                            NULL, "sigmoid grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Sigmoid", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 103)},
                               1, "sigmoid random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Sigmoid", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -9, 9, 1007)},
                               1, "sigmoid [] odd size");
    fails += kiln_optest_sweep("Sigmoid", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -9, 9, 1008)},
                               1, "sigmoid [] 7 elements");
    fails += kiln_optest_sweep("Sigmoid", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -6, 6, 5002)},
                               1, "sigmoid (NHWC) ");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1, .conv_epilogue = true,
    .cuda = "if (x >= 0.f) return 1.f / (1.f + expf(-x));\n"
            "    const float e = expf(x);\n"
            "    return e / (1.f + e);",
};

const kiln_op_def kiln_op_sigmoid = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "Sigmoid", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
