/* acosh.c — Acosh: y = acosh(x), the inverse hyperbolic cosine, elementwise. Float dtypes (f16, bf16, f32,
 * f64); opset 9. Computed in double and rounded to the output dtype. Below 1 the result is NaN.
 * No gradient (inference only). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double acosh_fn(double x, const kiln_unary_args *a) { return acosh(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, acosh_fn, NULL, NULL); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* expected values: Python's math.acosh */
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(1, 1.25, 1.5, 2, 3, 10, 100));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(0, 0.69314718055994529, 0.96242365011920694, 1.3169578969248166, 1.7627471740390861, 2.9932228461263808, 5.2982923656104841));
    fails += kiln_optest("Acosh", "", 1, &x, 1, &y, 1e-6, 1e-6, "acosh f32");
    x = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(1.25, 1.5, 2));
    y = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(0.69314718055994529, 0.96242365011920694, 1.3169578969248166));
    fails += kiln_optest("Acosh", "", 1, &x, 1, &y, 0, 1e-14, "acosh f64");
    x = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(3, 10));
    y = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(1.7627471740390861, 2.9932228461263808));
    fails += kiln_optest("Acosh", "", 1, &x, 1, &y, 1e-3, 1e-3, "acosh f16");
    x = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(0.5));
    y = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(NAN));
    fails += kiln_optest("Acosh", "", 1, &x, 1, &y, 0, 0, "acosh outside its domain is NaN");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Acosh", "", 1, &x, 1, KILN_ERR_TYPE, "acosh rejects i32");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Acosh", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), 1, 5, 5200)},
                               1, "acosh random 2x3x17x19");
    fails += kiln_optest_sweep("Acosh", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), 1, 5, 5201)},
                               1, "acosh 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_acosh = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Acosh", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
