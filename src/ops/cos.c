/* cos.c — Cos: y = cos(x), the cosine, elementwise. Float dtypes (f16, bf16, f32,
 * f64); opset 7. Computed in double and rounded to the output dtype.
 * No gradient (inference only). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double cos_fn(double x, const kiln_unary_args *a) { return cos(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, cos_fn, NULL, NULL); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* expected values: Python's math.cos */
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-3, -1, -0.5, 0, 0.5, 1, 3));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-0.98999249660044542, 0.54030230586813977, 0.87758256189037276, 1, 0.87758256189037276, 0.54030230586813977, -0.98999249660044542));
    fails += kiln_optest("Cos", "", 1, &x, 1, &y, 1e-6, 1e-6, "cos f32");
    x = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(-1, -0.5, 0));
    y = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(0.54030230586813977, 0.87758256189037276, 1));
    fails += kiln_optest("Cos", "", 1, &x, 1, &y, 0, 1e-14, "cos f64");
    x = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.5, 1));
    y = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.87758256189037276, 0.54030230586813977));
    fails += kiln_optest("Cos", "", 1, &x, 1, &y, 1e-3, 1e-3, "cos f16");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Cos", "", 1, &x, 1, KILN_ERR_TYPE, "cos rejects i32");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Cos", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -4, 4, 5120)},
                               1, "cos random 2x3x17x19");
    fails += kiln_optest_sweep("Cos", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -4, 4, 5121)},
                               1, "cos 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_cos = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Cos", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
