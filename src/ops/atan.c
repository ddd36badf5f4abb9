/* atan.c — Atan: y = atan(x), the arctangent, elementwise. Float dtypes (f16, bf16, f32,
 * f64); opset 7. Computed in double and rounded to the output dtype.
 * No gradient (inference only). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double atan_fn(double x, const kiln_unary_args *a) { return atan(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, atan_fn, NULL, NULL); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* expected values: Python's math.atan */
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-10, -1, -0.5, 0, 0.5, 1, 10));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-1.4711276743037347, -0.78539816339744828, -0.46364760900080609, 0, 0.46364760900080609, 0.78539816339744828, 1.4711276743037347));
    fails += kiln_optest("Atan", "", 1, &x, 1, &y, 1e-6, 1e-6, "atan f32");
    x = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(-1, -0.5, 0));
    y = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(-0.78539816339744828, -0.46364760900080609, 0));
    fails += kiln_optest("Atan", "", 1, &x, 1, &y, 0, 1e-14, "atan f64");
    x = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.5, 1));
    y = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.46364760900080609, 0.78539816339744828));
    fails += kiln_optest("Atan", "", 1, &x, 1, &y, 1e-3, 1e-3, "atan f16");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Atan", "", 1, &x, 1, KILN_ERR_TYPE, "atan rejects i32");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Atan", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -4, 4, 5160)},
                               1, "atan random 2x3x17x19");
    fails += kiln_optest_sweep("Atan", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -4, 4, 5161)},
                               1, "atan 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_atan = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Atan", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
