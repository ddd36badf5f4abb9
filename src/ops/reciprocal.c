/* reciprocal.c — Reciprocal: y = 1 / x. Float dtypes; opsets 6 and 13 (bf16). 1/0 = inf.
 * Gradient: -dY * Y^2, read from Y. */
#include "../core/optest.h"
#include "unary.h"

static double reciprocal(double x, const kiln_unary_args *a) { return 1.0 / x; }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) {
    return kiln_unary_forward_args(c, reciprocal, NULL, NULL);
}

static double deriv(double x, double y, const kiln_unary_args *a) { return -y * y; }
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_Y, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(-4, 0.5, 3, 1e-3));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(-0.25, 2, 0.333333343, 1000));
    fails += kiln_optest("Reciprocal", "", 1, &x, 1, &y, 1e-7, 1e-6, "reciprocal f32");
    x = kt_make(KILN_BF16, 1, KT_DIMS(3), KT_VALS(-8, 0.25, 3));
    y = kt_make(KILN_BF16, 1, KT_DIMS(3), KT_VALS(-0.125, 4, 0.333333333));
    fails += kiln_optest("Reciprocal", "", 1, &x, 1, &y, 0, 0, "reciprocal bf16");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(1, 2));
    fails += kiln_optest_fails("Reciprocal", "", 1, &x, 1, KILN_ERR_TYPE, "reciprocal rejects i32");
    fails += kiln_unary_gradcheck("Reciprocal", "", 0, 6, KT_VALS(-2, -0.7, -0.4, 0.5, 1.1, 3),
                                  "reciprocal grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Reciprocal", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), 0.25, 4, 121)},
                               1, "reciprocal random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Reciprocal", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), 0.2, 3, 1039)},
                               1, "reciprocal [] odd size");
    fails += kiln_optest_sweep("Reciprocal", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), 0.2, 3, 1040)},
                               1, "reciprocal [] 7 elements");
    fails += kiln_optest_sweep("Reciprocal", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -3, -0.2, 1041)},
                               1, "reciprocal [] odd size");
    fails += kiln_optest_sweep("Reciprocal", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -3, -0.2, 1042)},
                               1, "reciprocal [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1,
    .cuda = "return 1.f / x;",
};

const kiln_op_def kiln_op_reciprocal = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "Reciprocal", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
