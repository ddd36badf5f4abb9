/* leakyrelu.c — LeakyRelu: y = x for x >= 0, alpha * x otherwise (alpha default 0.01).
 * Float dtypes (f16, bf16, f32, f64); opsets 6 and 16 (16 only added bf16).
 * Gradient: dY for X >= 0, alpha * dY otherwise (read from X: alpha may be <= 0). */
#include "../core/optest.h"
#include "unary.h"

static double leakyrelu(double x, const kiln_unary_args *a) { return x < 0 ? a->alpha * x : x; }

static kiln_unary_args args(const kiln_node *n) {
    return (kiln_unary_args){.alpha = kiln_attr_float(n, "alpha", 0.01f)};
}

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, false); }

static kiln_status forward(kiln_op_ctx *c) {
    kiln_unary_args a = args(c->node);
    return kiln_unary_forward_args(c, leakyrelu, NULL, &a);
}

static double deriv(double x, double y, const kiln_unary_args *a) { return x < 0 ? a->alpha : 1; }
static void grad_f32(const float *x, const float *y, const float *dy, float *dx, int64_t n,
                     const kiln_unary_args *a) {
    const float alpha = (float)a->alpha;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float d = dy[i];
        dx[i] = x[i] < 0 ? alpha * d : d;
    }
}
static const kiln_unary_grad_def grad_def = {deriv, args, KILN_UNARY_X, grad_f32};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(5), KT_VALS(-2, -0.5, 0, 1.5, 3));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(5),
                             KT_VALS(-0.0199999996, -0.00499999989, 0, 1.5, 3));
    fails += kiln_optest("LeakyRelu", "", 1, &x, 1, &y, 1e-7, 1e-6, "leakyrelu default alpha");
    x = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(-2, -0.5, 0, 1.5));
    y = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(-0.2, -0.05, 0, 1.5));
    /* alpha is a float attribute: 0.1f differs from 0.1 by 1.5e-9 relative */
    fails += kiln_optest("LeakyRelu", "alpha=0.1", 1, &x, 1, &y, 0, 1e-7, "leakyrelu f64 alpha");
    x = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest_fails("LeakyRelu", "", 1, &x, 1, KILN_ERR_TYPE, "leakyrelu rejects i32");
    fails += kiln_unary_gradcheck("LeakyRelu", "", 0, 6, KT_VALS(-0.9, 0.4, -0.2, 0.7, 1.3, -1.6),
                                  "leakyrelu grad default alpha");
    fails += kiln_unary_gradcheck("LeakyRelu", "alpha=-0.5", 0, 6, KT_VALS(-0.9, 0.4, -0.2, 0.7, 1.3, -1.6),
                                  "leakyrelu grad alpha -0.5");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("LeakyRelu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 102)},
                               1, "leakyrelu random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("LeakyRelu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -2, 2, 1003)},
                               1, "leakyrelu [] odd size");
    fails += kiln_optest_sweep("LeakyRelu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -2, 2, 1004)},
                               1, "leakyrelu [] 7 elements");
    fails += kiln_optest_sweep("LeakyRelu", "alpha=0.3", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -2, 2, 1005)},
                               1, "leakyrelu [alpha=0.3] odd size");
    fails += kiln_optest_sweep("LeakyRelu", "alpha=0.3", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -2, 2, 1006)},
                               1, "leakyrelu [alpha=0.3] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1, .n_params = 1, .param_attr = {"alpha"}, .param_default = {0.01f}, .conv_epilogue = true,
    .cuda = "return x < 0.f ? p0 * x : x;",
};

const kiln_op_def kiln_op_leakyrelu = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "LeakyRelu", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
