/* sqrt.c — Sqrt: y = sqrt(x). Float dtypes; opsets 6 and 13 (bf16). Negative x gives NaN.
 * Gradient: dY / (2 Y), read from Y. */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double sqrt_fn(double x, const kiln_unary_args *a) { return sqrt(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, sqrt_fn, NULL, NULL); }

static double deriv(double x, double y, const kiln_unary_args *a) { return 0.5 / y; }
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_Y, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(0, 0.25, 2, 9, 1e6));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(0, 0.5, 1.41421354, 3, 1000));
    fails += kiln_optest("Sqrt", "", 1, &x, 1, &y, 1e-7, 1e-6, "sqrt f32");
    x = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(2, 1e-300));
    y = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(1.4142135623730951, 1e-150));
    fails += kiln_optest("Sqrt", "", 1, &x, 1, &y, 0, 1e-15, "sqrt f64");
    x = kt_make(KILN_BF16, 1, KT_DIMS(3), KT_VALS(4, 0.0625, 256));
    y = kt_make(KILN_BF16, 1, KT_DIMS(3), KT_VALS(2, 0.25, 16));
    fails += kiln_optest("Sqrt", "", 1, &x, 1, &y, 0, 0, "sqrt bf16");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(4, 9));
    fails += kiln_optest_fails("Sqrt", "", 1, &x, 1, KILN_ERR_TYPE, "sqrt rejects i32");
    fails += kiln_gradcheck("Sqrt", "", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), 0.3, 3, 1)},
                            NULL, "sqrt grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Sqrt", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), 0.1, 4, 120)},
                               1, "sqrt random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Sqrt", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), 0.05, 6, 1037)},
                               1, "sqrt [] odd size");
    fails += kiln_optest_sweep("Sqrt", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), 0.05, 6, 1038)},
                               1, "sqrt [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1,
    .cuda = "return sqrtf(x);",
};

const kiln_op_def kiln_op_sqrt = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "Sqrt", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
