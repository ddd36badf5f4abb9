/* floor.c — Floor: y = largest integer <= x. Float dtypes; opsets 6 and 13 (bf16).
 * Gradient: zero (Floor is a step function). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double floor_fn(double x, const kiln_unary_args *a) { return floor(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, floor_fn, NULL, NULL); }

static double deriv(double x, double y, const kiln_unary_args *a) { return 0; }
static const kiln_unary_grad_def grad_def = {deriv, NULL, 0, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-1.5, -1, -0.2, 0, 0.2, 1.5, 2.5));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-2, -1, -1, 0, 0, 1, 2));
    fails += kiln_optest("Floor", "", 1, &x, 1, &y, 0, 0, "floor f32");
    /* 2^52 + 0.5 does not exist in f64; 4503599627370495.5 = 2^52 - 0.5 does */
    x = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(4503599627370495.5, -0.999999, 1e300));
    y = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(4503599627370495, -1, 1e300));
    fails += kiln_optest("Floor", "", 1, &x, 1, &y, 0, 0, "floor f64");
    x = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(-2.75, 0.5, 1000.5));
    y = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(-3, 0, 1000));
    fails += kiln_optest("Floor", "", 1, &x, 1, &y, 0, 0, "floor f16");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(1, 2));
    fails += kiln_optest_fails("Floor", "", 1, &x, 1, KILN_ERR_TYPE, "floor rejects i32");
    /* away from the integers, where the steps are */
    fails += kiln_unary_gradcheck("Floor", "", 0, 6, KT_VALS(-1.7, -0.4, 0.3, 0.6, 1.5, 2.2),
                                  "floor grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Floor", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 116)},
                               1, "floor random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Floor", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -5, 5, 1047)},
                               1, "floor [] odd size");
    fails += kiln_optest_sweep("Floor", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -5, 5, 1048)},
                               1, "floor [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1,
    .cuda = "return floorf(x);",
};

const kiln_op_def kiln_op_floor = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "Floor", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
