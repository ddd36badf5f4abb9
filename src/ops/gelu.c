/* gelu.c — Gelu (opset 20): approximate="none" (default): y = x/2 * (1 + erf(x / sqrt(2)));
 * approximate="tanh": y = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))). Float dtypes.
 * Both are evaluated in forms without the cancellation of 1 + (-1 + tiny) for negative x:
 * 1 + erf(z) = erfc(-z), and 1 + tanh(u) = 2 / (1 + exp(-2u)).
 * Gradient: dY * (Phi(X) + X * phi(X)) (phi the standard normal density, Phi = 1/2 +
 * erf(X / sqrt(2)) / 2), or for the tanh form, with s = sigmoid(u2) and u2 = 2 sqrt(2/pi)
 * (X + 0.044715 X^3): dY * (s + X s (1 - s) u2'). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>
#include <string.h>

#define SQRT1_2 0.70710678118654752440      /* 1/sqrt(2) */
#define SQRT_2_PI 0.79788456080286535588    /* sqrt(2/pi) */

static double gelu_erf(double x, const kiln_unary_args *a) {
    if (isinf(x)) return x > 0 ? x : 0; /* the limits; the formula gives inf * 0 */
    return 0.5 * x * erfc(-x * SQRT1_2);
}

static double gelu_tanh(double x, const kiln_unary_args *a) {
    if (isinf(x)) return x > 0 ? x : 0;
    double u2 = 2 * SQRT_2_PI * (x + 0.044715 * x * x * x);
    /* x * sigmoid(u2), with exp only of a non-positive argument */
    if (u2 >= 0) return x / (1 + exp(-u2));
    double e = exp(u2);
    return x * e / (1 + e);
}

static kiln_status infer(kiln_op_ctx *c) {
    const char *ap = kiln_attr_string(c->node, "approximate", "none");
    KILN_OP_CHECK(c, strcmp(ap, "none") == 0 || strcmp(ap, "tanh") == 0, KILN_ERR_UNSUPPORTED,
                  "attribute approximate='%s' is not 'none' or 'tanh'", ap);
    return kiln_unary_infer(c, false);
}

static kiln_status forward(kiln_op_ctx *c) {
    bool tanh_form = strcmp(kiln_attr_string(c->node, "approximate", "none"), "tanh") == 0;
    return kiln_unary_forward_args(c, tanh_form ? gelu_tanh : gelu_erf, NULL, NULL);
}

/* The derivative's args: alpha is 1 for the tanh form, 0 for erf. */
static kiln_unary_args args(const kiln_node *n) {
    return (kiln_unary_args){.alpha = strcmp(kiln_attr_string(n, "approximate", "none"), "tanh") == 0};
}

static double sigmoid(double u) {
    if (u >= 0) return 1 / (1 + exp(-u));
    const double e = exp(u);
    return e / (1 + e);
}

static double deriv(double x, double y, const kiln_unary_args *a) {
    if (isinf(x)) return x > 0 ? 1 : 0; /* the limits; the formulas give inf * 0 */
    if (a->alpha == 0) return 0.5 * erfc(-x * SQRT1_2) + x * exp(-0.5 * x * x) * 0.39894228040143267794;
    const double s = sigmoid(2 * SQRT_2_PI * (x + 0.044715 * x * x * x));
    return s + x * s * (1 - s) * 2 * SQRT_2_PI * (1 + 3 * 0.044715 * x * x);
}
static const kiln_unary_grad_def grad_def = {deriv, args, KILN_UNARY_X, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-3, -1, -0.5, 0, 0.5, 1, 3));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(7),
                             KT_VALS(-0.00404969417, -0.158655256, -0.154268771, 0, 0.345731229,
                                     0.841344774, 2.99595022));
    fails += kiln_optest("Gelu", "", 1, &x, 1, &y, 1e-7, 1e-6, "gelu erf f32");
    x = kt_make(KILN_F32, 1, KT_DIMS(7), KT_VALS(-3, -1, -0.5, 0, 0.5, 1, 3));
    y = kt_make(KILN_F32, 1, KT_DIMS(7),
                KT_VALS(-0.00363739207, -0.158808008, -0.154285997, 0, 0.345714003, 0.841192007,
                        2.99636269));
    fails += kiln_optest("Gelu", "approximate=tanh", 1, &x, 1, &y, 1e-7, 1e-6, "gelu tanh f32");
    /* f64 references from mpmath at 50 digits; -10 checks the cancellation-free forms */
    x = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(-10, -2, 0.1, 4));
    y = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(-7.6198530241605261e-23, -0.045500263896358414,
                                                 0.053982783727702901, 3.9998733150326675));
    fails += kiln_optest("Gelu", "approximate=none", 1, &x, 1, &y, 0, 1e-12, "gelu erf f64");
    x = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(-10, -5, -2, 1.5, 4));
    y = kt_make(KILN_F64, 1, KT_DIMS(5),
                KT_VALS(-1.2040923482098107e-37, -2.291796196629506e-7, -0.045402305912224981,
                        1.3995715769802329, 3.9999297540518076));
    fails += kiln_optest("Gelu", "approximate=tanh", 1, &x, 1, &y, 0, 1e-12, "gelu tanh f64");
    x = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("Gelu", "approximate=fast", 1, &x, 1, KILN_ERR_UNSUPPORTED,
                               "gelu rejects approximate=fast");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("Gelu", "", 1, &x, 1, KILN_ERR_TYPE, "gelu rejects i32");
    fails += kiln_gradcheck("Gelu", "", 0, 1, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 4), -3, 3, 1)},
                            NULL, "gelu grad");
    fails += kiln_gradcheck("Gelu", "approximate=tanh", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 4), -3, 3, 2)}, NULL,
                            "gelu grad tanh form");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Gelu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 108)},
                               1, "gelu random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Gelu", "", 20, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -5, 5, 1017)},
                               1, "gelu [] odd size");
    fails += kiln_optest_sweep("Gelu", "", 20, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -5, 5, 1018)},
                               1, "gelu [] 7 elements");
    fails += kiln_optest_sweep("Gelu", "approximate=tanh", 20, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -5, 5, 1019)},
                               1, "gelu [approximate=tanh] odd size");
    fails += kiln_optest_sweep("Gelu", "approximate=tanh", 20, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -5, 5, 1020)},
                               1, "gelu [approximate=tanh] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_gelu = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Gelu", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
