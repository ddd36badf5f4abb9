/* atanh.c — Atanh: y = atanh(x), the inverse hyperbolic tangent, elementwise. Float dtypes (f16, bf16, f32,
 * f64); opset 9. Computed in double and rounded to the output dtype. Outside [-1, 1] the result is NaN; at +-1 it is +-inf.
 * No gradient (inference only). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double atanh_fn(double x, const kiln_unary_args *a) { return atanh(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, atanh_fn, NULL, NULL); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* expected values: Python's math.atanh */
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-0.90000000000000002, -0.5, -0.25, 0, 0.25, 0.5, 0.90000000000000002));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-1.4722194895832204, -0.54930614433405478, -0.25541281188299536, 0, 0.25541281188299536, 0.54930614433405478, 1.4722194895832204));
    fails += kiln_optest("Atanh", "", 1, &x, 1, &y, 1e-6, 1e-6, "atanh f32");
    x = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(-0.5, -0.25, 0));
    y = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(-0.54930614433405478, -0.25541281188299536, 0));
    fails += kiln_optest("Atanh", "", 1, &x, 1, &y, 0, 1e-14, "atanh f64");
    x = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.25, 0.5));
    y = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.25541281188299536, 0.54930614433405478));
    fails += kiln_optest("Atanh", "", 1, &x, 1, &y, 1e-3, 1e-3, "atanh f16");
    x = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(1.5));
    y = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(NAN));
    fails += kiln_optest("Atanh", "", 1, &x, 1, &y, 0, 0, "atanh outside its domain is NaN");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Atanh", "", 1, &x, 1, KILN_ERR_TYPE, "atanh rejects i32");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Atanh", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -0.95, 0.95, 5210)},
                               1, "atanh random 2x3x17x19");
    fails += kiln_optest_sweep("Atanh", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -0.95, 0.95, 5211)},
                               1, "atanh 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_atanh = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Atanh", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
