/* celu.c — Celu: y = max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) (alpha default 1.0,
 * must be non-zero). Opset 12. The spec lists f32 only; every float dtype is accepted.
 * Gradient: dY for X > 0, dY * exp(X / alpha) otherwise. */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

/* For x > 0 the exp term is positive and min() drops it; for x <= 0 max() is 0. */
static double celu(double x, const kiln_unary_args *a) {
    return x > 0 ? x : a->alpha * expm1(x / a->alpha);
}

static kiln_unary_args args(const kiln_node *n) {
    return (kiln_unary_args){.alpha = kiln_attr_float(n, "alpha", 1.0f)};
}

static kiln_status infer(kiln_op_ctx *c) {
    float alpha = kiln_attr_float(c->node, "alpha", 1.0f);
    KILN_OP_CHECK(c, alpha != 0, KILN_ERR_UNSUPPORTED, "attribute alpha must be non-zero");
    return kiln_unary_infer(c, false);
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_unary_args a = args(c->node);
    return kiln_unary_forward_args(c, celu, NULL, &a);
}

static double deriv(double x, double y, const kiln_unary_args *a) { return x > 0 ? 1 : exp(x / a->alpha); }
static const kiln_unary_grad_def grad_def = {deriv, args, KILN_UNARY_X, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(-3, -1, 0, 1, 2.5));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(-0.950212955, -0.63212055, 0, 1, 2.5));
    fails += kiln_optest("Celu", "", 1, &x, 1, &y, 1e-7, 1e-6, "celu default alpha");
    x = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(-3, -1, 0, 1));
    y = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(-1.5537396797031404, -0.78693868057473315, 0, 1));
    fails += kiln_optest("Celu", "alpha=2.0", 1, &x, 1, &y, 0, 1e-13, "celu f64 alpha=2");
    x = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("Celu", "alpha=0.0", 1, &x, 1, KILN_ERR_UNSUPPORTED,
                               "celu rejects alpha=0");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("Celu", "", 1, &x, 1, KILN_ERR_TYPE, "celu rejects i32");
    fails += kiln_unary_gradcheck("Celu", "", 0, 6, KT_VALS(-0.9, 0.4, -0.2, 0.7, 1.3, -1.6),
                                  "celu grad");
    fails += kiln_unary_gradcheck("Celu", "alpha=2.5", 0, 6, KT_VALS(-0.9, 0.4, -0.2, 0.7, 1.3, -1.6),
                                  "celu grad alpha 2.5");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Celu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 107)},
                               1, "celu random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Celu", "alpha=2.0", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -4, 3, 1015)},
                               1, "celu [alpha=2.0] odd size");
    fails += kiln_optest_sweep("Celu", "alpha=2.0", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -4, 3, 1016)},
                               1, "celu [alpha=2.0] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_celu = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Celu", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
