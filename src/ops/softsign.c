/* softsign.c — Softsign: y = x / (1 + |x|). Float dtypes; opset 1 (unchanged since).
 * +-inf give +-1, the limit, rather than inf / inf.
 * Gradient: dY / (1 + |X|)^2. */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double softsign(double x, const kiln_unary_args *a) {
    return isinf(x) ? copysign(1.0, x) : x / (1 + fabs(x));
}

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) {
    return kiln_unary_forward_args(c, softsign, NULL, NULL);
}

static double deriv(double x, double y, const kiln_unary_args *a) {
    const double d = 1 + fabs(x);
    return 1 / (d * d);
}
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_X, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(-3, -1, 0, 0.5, 100, INFINITY));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(6),
                             KT_VALS(-0.75, -0.5, 0, 0.333333343, 0.990099013, 1));
    fails += kiln_optest("Softsign", "", 1, &x, 1, &y, 1e-7, 1e-6, "softsign f32");
    x = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(-3, 1, 7));
    y = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(-0.75, 0.5, 0.875));
    fails += kiln_optest("Softsign", "", 1, &x, 1, &y, 0, 0, "softsign f16");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("Softsign", "", 1, &x, 1, KILN_ERR_TYPE, "softsign rejects i32");
    /* away from the kink of |X| at 0 (the derivative is smooth there, its own is not) */
    fails += kiln_unary_gradcheck("Softsign", "", 0, 6, KT_VALS(-0.9, 0.4, -0.2, 0.7, 1.3, -1.6),
                                  "softsign grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Softsign", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 112)},
                               1, "softsign random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Softsign", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -5, 5, 1027)},
                               1, "softsign [] odd size");
    fails += kiln_optest_sweep("Softsign", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -5, 5, 1028)},
                               1, "softsign [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1,
    .cuda = "return fabsf(x) == KINF ? copysignf(1.f, x) : x / (1.f + fabsf(x));",
};

const kiln_op_def kiln_op_softsign = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "Softsign", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
