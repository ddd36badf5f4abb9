/* erf.c — Erf: y = erf(x). Float dtypes; opsets 9 and 13 (bf16). The spec also lists
 * integer dtypes, whose results would only be -1, 0 or 1 after truncation; kiln rejects
 * them (no exporter emits them).
 * Gradient: dY * 2 / sqrt(pi) * exp(-X^2). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double erf_fn(double x, const kiln_unary_args *a) { return erf(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, erf_fn, NULL, NULL); }

static double deriv(double x, double y, const kiln_unary_args *a) {
    return 1.12837916709551257390 * exp(-x * x); /* 2 / sqrt(pi) */
}
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_X, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-3, -1, -0.5, 0, 0.5, 1, 3));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(7),
                             KT_VALS(-0.999977887, -0.842700779, -0.520499885, 0, 0.520499885,
                                     0.842700779, 0.999977887));
    fails += kiln_optest("Erf", "", 1, &x, 1, &y, 1e-7, 1e-6, "erf f32");
    x = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-0.1, 1e-5, 2));
    y = kt_make(KILN_F64, 1, KT_DIMS(3),
                KT_VALS(-0.1124629160182849, 1.1283791670579e-05, 0.99532226501895271));
    fails += kiln_optest("Erf", "", 1, &x, 1, &y, 0, 1e-13, "erf f64");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("Erf", "", 1, &x, 1, KILN_ERR_TYPE, "erf rejects i32");
    fails += kiln_gradcheck("Erf", "", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -2, 2, 1)},
                            NULL, "erf grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Erf", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 113)},
                               1, "erf random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Erf", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -3, 3, 1031)},
                               1, "erf [] odd size");
    fails += kiln_optest_sweep("Erf", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -3, 3, 1032)},
                               1, "erf [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1,
    .cuda = "return erff(x);",
};

const kiln_op_def kiln_op_erf = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "Erf", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
