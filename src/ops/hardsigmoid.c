/* hardsigmoid.c — HardSigmoid: y = max(0, min(1, alpha * x + beta)) (alpha default 0.2,
 * beta 0.5). Float dtypes; opset 6. NaN stays NaN.
 * Gradient: alpha * dY where 0 < alpha * X + beta < 1, else 0. */
#include "../core/optest.h"
#include "unary.h"

static double hardsigmoid(double x, const kiln_unary_args *a) {
    double v = a->alpha * x + a->beta;
    return v < 0 ? 0 : v > 1 ? 1 : v; /* not fmin/fmax: they would turn NaN into 0 or 1 */
}

static kiln_unary_args args(const kiln_node *n) {
    return (kiln_unary_args){
        .alpha = kiln_attr_float(n, "alpha", 0.2f),
        .beta = kiln_attr_float(n, "beta", 0.5f),
    };
}

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }

static kiln_status forward(kiln_op_ctx *c) {
    kiln_unary_args a = args(c->node);
    return kiln_unary_forward_args(c, hardsigmoid, NULL, &a);
}

static double deriv(double x, double y, const kiln_unary_args *a) {
    const double v = a->alpha * x + a->beta;
    return v > 0 && v < 1 ? a->alpha : 0;
}
static const kiln_unary_grad_def grad_def = {deriv, args, KILN_UNARY_X, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(-3, -1, 0, 1, 3));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(0, 0.3, 0.5, 0.7, 1));
    fails += kiln_optest("HardSigmoid", "", 1, &x, 1, &y, 1e-7, 1e-6, "hardsigmoid defaults");
    /* alpha 0.5f, beta 0.6f = 0.600000024 as floats */
    x = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(-2, -1, 0, 0.5, 1));
    y = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(0, 0.100000024, 0.600000024, 0.850000024, 1));
    fails += kiln_optest("HardSigmoid", "alpha=0.5;beta=0.6", 1, &x, 1, &y, 1e-9, 1e-7,
                         "hardsigmoid f64 alpha beta");
    x = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(-4, 1.5, 4));
    y = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(0, 0.8, 1));
    fails += kiln_optest("HardSigmoid", "", 1, &x, 1, &y, 0, 1e-3, "hardsigmoid f16");
    x = kt_make(KILN_I16, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("HardSigmoid", "", 1, &x, 1, KILN_ERR_TYPE,
                               "hardsigmoid rejects i16");
    /* away from the kinks at alpha * X + beta = 0 and 1 */
    fails += kiln_unary_gradcheck("HardSigmoid", "", 0, 6, KT_VALS(-3.5, -2, -0.7, 0.4, 1.9, 3.2),
                                  "hardsigmoid grad");
    fails += kiln_unary_gradcheck("HardSigmoid", "alpha=0.5;beta=0.25", 0, 6, KT_VALS(-1.5, -0.3, 0.1, 0.9, 1.4, 2),
                                  "hardsigmoid grad alpha beta");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("HardSigmoid", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 109)},
                               1, "hardsigmoid random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("HardSigmoid", "alpha=0.3;beta=0.6", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -4, 4, 1021)},
                               1, "hardsigmoid [alpha=0.3;beta=0.6] odd size");
    fails += kiln_optest_sweep("HardSigmoid", "alpha=0.3;beta=0.6", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -4, 4, 1022)},
                               1, "hardsigmoid [alpha=0.3;beta=0.6] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1, .n_params = 2, .param_attr = {"alpha", "beta"}, .param_default = {0.2f, 0.5f}, .conv_epilogue = true,
    .cuda = "const float v = p0 * x + p1;\n"
            "    return v < 0.f ? 0.f : v > 1.f ? 1.f : v;",
};

const kiln_op_def kiln_op_hardsigmoid = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "HardSigmoid", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
