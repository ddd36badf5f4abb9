/* asinh.c — Asinh: y = asinh(x), the inverse hyperbolic sine, elementwise. Float dtypes (f16, bf16, f32,
 * f64); opset 9. Computed in double and rounded to the output dtype.
 * No gradient (inference only). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double asinh_fn(double x, const kiln_unary_args *a) { return asinh(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, asinh_fn, NULL, NULL); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* expected values: Python's math.asinh */
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-10, -1, -0.5, 0, 0.5, 1, 10));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-2.9982229502979698, -0.88137358701954305, -0.48121182505960347, 0, 0.48121182505960347, 0.88137358701954305, 2.9982229502979698));
    fails += kiln_optest("Asinh", "", 1, &x, 1, &y, 1e-6, 1e-6, "asinh f32");
    x = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(-1, -0.5, 0));
    y = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(-0.88137358701954305, -0.48121182505960347, 0));
    fails += kiln_optest("Asinh", "", 1, &x, 1, &y, 0, 1e-14, "asinh f64");
    x = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.5, 1));
    y = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.48121182505960347, 0.88137358701954305));
    fails += kiln_optest("Asinh", "", 1, &x, 1, &y, 1e-3, 1e-3, "asinh f16");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Asinh", "", 1, &x, 1, KILN_ERR_TYPE, "asinh rejects i32");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Asinh", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -4, 4, 5190)},
                               1, "asinh random 2x3x17x19");
    fails += kiln_optest_sweep("Asinh", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -4, 4, 5191)},
                               1, "asinh 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_asinh = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Asinh", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
