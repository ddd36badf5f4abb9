/* log.c — Log: y = ln(x). Float dtypes; opsets 6 and 13 (bf16). log(0) = -inf and
 * log of a negative number is NaN, as in IEEE arithmetic.
 * Gradient: dY / X. */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double log_fn(double x, const kiln_unary_args *a) { return log(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, log_fn, NULL, NULL); }

static double deriv(double x, double y, const kiln_unary_args *a) { return 1 / x; }
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_X, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(1e-3, 0.5, 1, 2, 10));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(5),
                             KT_VALS(-6.90775537, -0.693147182, 0, 0.693147182, 2.30258512));
    fails += kiln_optest("Log", "", 1, &x, 1, &y, 1e-7, 1e-6, "log f32");
    x = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(1e-300, 3, 1e300));
    y = kt_make(KILN_F64, 1, KT_DIMS(3),
                KT_VALS(-690.77552789821368, 1.0986122886681098, 690.77552789821368));
    fails += kiln_optest("Log", "", 1, &x, 1, &y, 0, 1e-13, "log f64");
    x = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 2));
    fails += kiln_optest_fails("Log", "", 1, &x, 1, KILN_ERR_TYPE, "log rejects i64");
    fails += kiln_gradcheck("Log", "", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), 0.3, 3, 1)},
                            NULL, "log grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Log", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), 0.1, 4, 119)},
                               1, "log random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Log", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), 0.05, 6, 1035)},
                               1, "log [] odd size");
    fails += kiln_optest_sweep("Log", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), 0.05, 6, 1036)},
                               1, "log [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1,
    .cuda = "return logf(x);",
};

const kiln_op_def kiln_op_log = {
    .precision = KILN_PREC_LOW, .prec_flags = KILN_PREC_EXP_LOG, .layout = KILN_LAYOUT_UNARY,
    .eltwise = &eltwise,
    .name = "Log", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
