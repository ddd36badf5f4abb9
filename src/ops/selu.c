/* selu.c — Selu: y = gamma * x for x > 0, gamma * alpha * (exp(x) - 1) otherwise.
 * Defaults alpha 1.67326319217681884765625, gamma 1.05070102214813232421875 (the float
 * values the spec gives). Float dtypes; opset 6.
 * Gradient: gamma * dY for X > 0, gamma * alpha * exp(X) * dY otherwise. */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double selu(double x, const kiln_unary_args *a) {
    return x > 0 ? a->gamma * x : a->gamma * a->alpha * expm1(x);
}

static kiln_unary_args args(const kiln_node *n) {
    return (kiln_unary_args){
        .alpha = kiln_attr_float(n, "alpha", 1.67326319217681884765625f),
        .gamma = kiln_attr_float(n, "gamma", 1.05070102214813232421875f),
    };
}

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }

static kiln_status forward(kiln_op_ctx *c) {
    kiln_unary_args a = args(c->node);
    return kiln_unary_forward_args(c, selu, NULL, &a);
}

static double deriv(double x, double y, const kiln_unary_args *a) {
    return x > 0 ? a->gamma : a->gamma * a->alpha * exp(x);
}
static const kiln_unary_grad_def grad_def = {deriv, args, KILN_UNARY_X, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(-3, -1, 0, 1, 2.5));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(5),
                             KT_VALS(-1.6705687, -1.11133075, 0, 1.05070102, 2.62675261));
    fails += kiln_optest("Selu", "", 1, &x, 1, &y, 1e-7, 1e-6, "selu defaults");
    x = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(-1, 0, 1));
    y = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(-3.79272342, 0, 3));
    fails += kiln_optest("Selu", "alpha=2.0;gamma=3.0", 1, &x, 1, &y, 1e-7, 1e-6,
                         "selu alpha=2 gamma=3");
    x = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-10, -0.5, 0.5));
    y = kt_make(KILN_F64, 1, KT_DIMS(3),
                KT_VALS(-1.7580195287561911, -0.69175818996524263, 0.52535051107406616));
    fails += kiln_optest("Selu", "", 1, &x, 1, &y, 0, 1e-13, "selu f64");
    x = kt_make(KILN_U8, 1, KT_DIMS(2), KT_VALS(1, 2));
    fails += kiln_optest_fails("Selu", "", 1, &x, 1, KILN_ERR_TYPE, "selu rejects u8");
    fails += kiln_unary_gradcheck("Selu", "", 0, 6, KT_VALS(-0.9, 0.4, -0.2, 0.7, 1.3, -1.6),
                                  "selu grad");
    fails += kiln_unary_gradcheck("Selu", "alpha=2.0;gamma=0.5", 0, 6, KT_VALS(-0.9, 0.4, -0.2, 0.7, 1.3, -1.6),
                                  "selu grad alpha 2 gamma 0.5");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Selu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 106)},
                               1, "selu random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Selu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -3, 3, 1013)},
                               1, "selu [] odd size");
    fails += kiln_optest_sweep("Selu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -3, 3, 1014)},
                               1, "selu [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_selu = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Selu", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
