/* hardswish.c — HardSwish: y = x * max(0, min(1, x/6 + 1/2)). Float dtypes; opset 14.
 * Gradient: dY * (X / 3 + 1/2) for -3 < X < 3, dY above, 0 below. */
#include "../core/optest.h"
#include "unary.h"

static double hardswish(double x, const kiln_unary_args *a) {
    double v = x / 6 + 0.5;
    return x * (v < 0 ? 0 : v > 1 ? 1 : v);
}

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) {
    return kiln_unary_forward_args(c, hardswish, NULL, NULL);
}

static double deriv(double x, double y, const kiln_unary_args *a) {
    return x <= -3 ? 0 : x >= 3 ? 1 : x / 3 + 0.5;
}
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_X, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-4, -3, -1, 0, 1, 3, 4));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(7),
                             KT_VALS(0, 0, -0.333333343, 0, 0.666666687, 3, 4));
    fails += kiln_optest("HardSwish", "", 1, &x, 1, &y, 1e-7, 1e-6, "hardswish f32");
    x = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-2.5, 0.5, 2.9));
    y = kt_make(KILN_F64, 1, KT_DIMS(3),
                KT_VALS(-0.20833333333333329, 0.29166666666666669, 2.8516666666666666));
    fails += kiln_optest("HardSwish", "", 1, &x, 1, &y, 0, 1e-14, "hardswish f64");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("HardSwish", "", 1, &x, 1, KILN_ERR_TYPE, "hardswish rejects i32");
    /* away from the kinks at -3 and 3 */
    fails += kiln_unary_gradcheck("HardSwish", "", 0, 6, KT_VALS(-4, -2.5, -0.5, 0.8, 2.2, 3.7),
                                  "hardswish grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("HardSwish", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 110)},
                               1, "hardswish random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("HardSwish", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -5, 5, 1023)},
                               1, "hardswish [] odd size");
    fails += kiln_optest_sweep("HardSwish", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -5, 5, 1024)},
                               1, "hardswish [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1, .conv_epilogue = true,
    .cuda = "const float v = x / 6.f + 0.5f;\n"
            "    return x * (v < 0.f ? 0.f : v > 1.f ? 1.f : v);",
};

const kiln_op_def kiln_op_hardswish = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "HardSwish", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
