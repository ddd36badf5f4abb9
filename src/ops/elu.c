/* elu.c — Elu: y = x for x >= 0, alpha * (exp(x) - 1) otherwise (alpha default 1.0).
 * Float dtypes; opset 6. expm1 keeps small negative x accurate.
 * Gradient: dY for X >= 0, dY * alpha * exp(X) otherwise. */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double elu(double x, const kiln_unary_args *a) { return x < 0 ? a->alpha * expm1(x) : x; }

static kiln_unary_args args(const kiln_node *n) {
    return (kiln_unary_args){.alpha = kiln_attr_float(n, "alpha", 1.0f)};
}

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }

static kiln_status forward(kiln_op_ctx *c) {
    kiln_unary_args a = args(c->node);
    return kiln_unary_forward_args(c, elu, NULL, &a);
}

static double deriv(double x, double y, const kiln_unary_args *a) { return x < 0 ? a->alpha * exp(x) : 1; }
static const kiln_unary_grad_def grad_def = {deriv, args, KILN_UNARY_X, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(-3, -1, -1e-4, 0, 2));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(5),
                             KT_VALS(-0.950212955, -0.63212055, -9.99949989e-05, 0, 2));
    fails += kiln_optest("Elu", "", 1, &x, 1, &y, 1e-7, 1e-6, "elu default alpha");
    x = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-3, -1, 0.5));
    y = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-1.9004258632642721, -1.2642411176571153, 0.5));
    fails += kiln_optest("Elu", "alpha=2.0", 1, &x, 1, &y, 0, 1e-13, "elu f64 alpha=2");
    x = kt_make(KILN_I8, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("Elu", "", 1, &x, 1, KILN_ERR_TYPE, "elu rejects i8");
    fails += kiln_unary_gradcheck("Elu", "", 0, 6, KT_VALS(-0.9, 0.4, -0.2, 0.7, 1.3, -1.6),
                                  "elu grad");
    fails += kiln_unary_gradcheck("Elu", "alpha=0.5", 0, 6, KT_VALS(-0.9, 0.4, -0.2, 0.7, 1.3, -1.6),
                                  "elu grad alpha 0.5");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Elu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 105)},
                               1, "elu random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Elu", "alpha=0.5", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -3, 3, 1011)},
                               1, "elu [alpha=0.5] odd size");
    fails += kiln_optest_sweep("Elu", "alpha=0.5", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -3, 3, 1012)},
                               1, "elu [alpha=0.5] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1, .n_params = 1, .param_attr = {"alpha"}, .param_default = {1.0f},
    .cuda = "return x < 0.f ? p0 * expm1f(x) : x;",
};

const kiln_op_def kiln_op_elu = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "Elu", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
