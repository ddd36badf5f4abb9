/* acos.c — Acos: y = acos(x), the arccosine, elementwise. Float dtypes (f16, bf16, f32,
 * f64); opset 7. Computed in double and rounded to the output dtype. Outside [-1, 1] the result is NaN.
 * No gradient (inference only). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double acos_fn(double x, const kiln_unary_args *a) { return acos(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, acos_fn, NULL, NULL); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* expected values: Python's math.acos */
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-1, -0.75, -0.5, 0, 0.5, 0.75, 1));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(3.1415926535897931, 2.4188584057763776, 2.0943951023931957, 1.5707963267948966, 1.0471975511965979, 0.72273424781341566, 0));
    fails += kiln_optest("Acos", "", 1, &x, 1, &y, 1e-6, 1e-6, "acos f32");
    x = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(-0.75, -0.5, 0));
    y = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(2.4188584057763776, 2.0943951023931957, 1.5707963267948966));
    fails += kiln_optest("Acos", "", 1, &x, 1, &y, 0, 1e-14, "acos f64");
    x = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.5, 0.75));
    y = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(1.0471975511965979, 0.72273424781341566));
    fails += kiln_optest("Acos", "", 1, &x, 1, &y, 1e-3, 1e-3, "acos f16");
    x = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(-2));
    y = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(NAN));
    fails += kiln_optest("Acos", "", 1, &x, 1, &y, 0, 0, "acos outside its domain is NaN");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Acos", "", 1, &x, 1, KILN_ERR_TYPE, "acos rejects i32");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Acos", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -1, 1, 5150)},
                               1, "acos random 2x3x17x19");
    fails += kiln_optest_sweep("Acos", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -1, 1, 5151)},
                               1, "acos 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_acos = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Acos", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
