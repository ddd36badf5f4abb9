/* exp.c — Exp: y = exp(x). Float dtypes; opsets 6 and 13 (bf16). Overflow gives inf.
 * Gradient: dY * Y. */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double exp_fn(double x, const kiln_unary_args *a) { return exp(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, exp_fn, NULL, NULL); }

static double deriv(double x, double y, const kiln_unary_args *a) { return y; }
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_Y, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(-2, 0, 0.5, 1, 10));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(5),
                             KT_VALS(0.135335281, 1, 1.64872122, 2.71828175, 22026.4648));
    fails += kiln_optest("Exp", "", 1, &x, 1, &y, 1e-7, 1e-6, "exp f32");
    x = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(-0.5, 700));
    y = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(0.60653065971263342, 1.0142320547350045e+304));
    fails += kiln_optest("Exp", "", 1, &x, 1, &y, 0, 1e-13, "exp f64");
    x = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(-1, 0, 2));
    y = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(0.367879441, 1, 7.3890561));
    fails += kiln_optest("Exp", "", 1, &x, 1, &y, 0, 1e-3, "exp f16");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("Exp", "", 1, &x, 1, KILN_ERR_TYPE, "exp rejects i32");
    fails += kiln_gradcheck("Exp", "", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -2, 2, 1)},
                            NULL, "exp grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Exp", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -4, 4, 118)},
                               1, "exp random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Exp", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -6, 6, 1033)},
                               1, "exp [] odd size");
    fails += kiln_optest_sweep("Exp", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -6, 6, 1034)},
                               1, "exp [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1,
    .cuda = "return expf(x);",
};

const kiln_op_def kiln_op_exp = {
    .precision = KILN_PREC_LOW, .prec_flags = KILN_PREC_EXP_LOG, .layout = KILN_LAYOUT_UNARY,
    .eltwise = &eltwise,
    .name = "Exp", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
