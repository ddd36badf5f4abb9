/* round.c — Round: y = x rounded to the nearest integer, halves to even (numpy's round,
 * C's rint in the default rounding mode). Float dtypes (f16, bf16, f32, f64); opsets 11
 * and 22. NaN and infinities pass through. No gradient (it is 0 almost everywhere and
 * ONNX defines none). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double round_fn(double x, const kiln_unary_args *a) { return nearbyint(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, round_fn, NULL, NULL); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* the ONNX spec's example: halves go to the even neighbour */
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(15),
                             KT_VALS(0.1, 0.5, 0.9, 1.2, 1.5, 1.8, 2.3, 2.5, 2.7, -1.1, -1.5, -1.9, -2.2,
                                     -2.5, -2.8));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(15),
                             KT_VALS(0, 0, 1, 1, 2, 2, 2, 2, 3, -1, -2, -2, -2, -2, -3));
    fails += kiln_optest("Round", "", 1, &x, 1, &y, 0, 0, "round halves to even");
    x = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(4503599627370495.5, -0.5, INFINITY, NAN));
    y = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(4503599627370496, -0.0, INFINITY, NAN));
    fails += kiln_optest("Round", "", 1, &x, 1, &y, 0, 0, "round f64 large, -0.5, inf, NaN");
    x = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(3.5, 4.5, -0.25));
    y = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(4, 4, 0));
    fails += kiln_optest("Round", "", 1, &x, 1, &y, 0, 0, "round f16");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Round", "", 1, &x, 1, KILN_ERR_TYPE, "round rejects i32");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Round", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -9, 9, 5301)},
                               1, "round random 2x3x17x19");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_round = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Round", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
