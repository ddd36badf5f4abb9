/* tanh.c — Tanh: y = tanh(x). Float dtypes; opsets 6 and 13 (bf16).
 * Gradient: dY * (1 - Y^2), read from Y. */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double tanh_fn(double x, const kiln_unary_args *a) { return tanh(x); }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, tanh_fn, NULL, NULL); }

static double deriv(double x, double y, const kiln_unary_args *a) { return 1 - y * y; }
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_Y, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(-3, -0.5, 0, 0.5, 3, 30));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(-0.995054781, -0.462117165, 0,
                                                              0.462117165, 0.995054781, 1));
    fails += kiln_optest("Tanh", "", 1, &x, 1, &y, 1e-7, 1e-6, "tanh f32");
    x = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-1e-9, 0.25, 20));
    y = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-1.0000000000000001e-09, 0.24491866240370913, 1));
    fails += kiln_optest("Tanh", "", 1, &x, 1, &y, 0, 1e-13, "tanh f64");
    /* bf16: -0.5 and 3 are exact; expected values round to bf16 like the output */
    x = kt_make(KILN_BF16, 1, KT_DIMS(2), KT_VALS(-0.5, 3));
    y = kt_make(KILN_BF16, 1, KT_DIMS(2), KT_VALS(-0.462117165, 0.995054781));
    fails += kiln_optest("Tanh", "", 1, &x, 1, &y, 0, 8e-3, "tanh bf16");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("Tanh", "", 1, &x, 1, KILN_ERR_TYPE, "tanh rejects i32");
    fails += kiln_gradcheck("Tanh", "", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -2, 2, 1)},
                            NULL, "tanh grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Tanh", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 104)},
                               1, "tanh random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Tanh", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -3, 3, 1009)},
                               1, "tanh [] odd size");
    fails += kiln_optest_sweep("Tanh", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -3, 3, 1010)},
                               1, "tanh [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1, .conv_epilogue = true,
    .cuda = "return tanhf(x);",
};

const kiln_op_def kiln_op_tanh = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "Tanh", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
