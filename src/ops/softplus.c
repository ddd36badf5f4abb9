/* softplus.c — Softplus: y = log(1 + exp(x)). Float dtypes; opset 1 (unchanged since).
 * Written as max(x, 0) + log1p(exp(-|x|)), so exp never overflows (x = 1000 gives 1000,
 * not inf) and tiny results for very negative x keep their precision.
 * Gradient: dY * sigmoid(X). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double softplus(double x, const kiln_unary_args *a) {
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) {
    return kiln_unary_forward_args(c, softplus, NULL, NULL);
}

static double deriv(double x, double y, const kiln_unary_args *a) {
    if (x >= 0) return 1 / (1 + exp(-x));
    const double e = exp(x);
    return e / (1 + e);
}
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_X, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* softplus(-100) = 3.8e-44 is an f32 subnormal: atol covers its coarse rounding */
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-100, -1, 0, 1, 20, 100, 1000));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(3.78350585e-44, 0.313261688,
                                                              0.693147182, 1.31326163, 20, 100,
                                                              1000));
    fails += kiln_optest("Softplus", "", 1, &x, 1, &y, 1e-7, 1e-6, "softplus f32");
    x = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(-1000, -40, 1, 40, 1000));
    y = kt_make(KILN_F64, 1, KT_DIMS(5),
                KT_VALS(0, 4.2483542552915889e-18, 1.3132616875182228, 40, 1000));
    fails += kiln_optest("Softplus", "", 1, &x, 1, &y, 0, 1e-13, "softplus f64 extremes");
    x = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("Softplus", "", 1, &x, 1, KILN_ERR_TYPE, "softplus rejects i64");
    fails += kiln_gradcheck("Softplus", "", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -3, 3, 1)},
                            NULL, "softplus grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Softplus", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 111)},
                               1, "softplus random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Softplus", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -12, 12, 1025)},
                               1, "softplus [] odd size");
    fails += kiln_optest_sweep("Softplus", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -12, 12, 1026)},
                               1, "softplus [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1,
    .cuda = "return x > 0.f ? x + log1pf(expf(-x)) : log1pf(expf(x));",
};

const kiln_op_def kiln_op_softplus = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "Softplus", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
