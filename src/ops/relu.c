/* relu.c — Relu: y = max(x, 0). Floats and signed integers (opset 14).
 * Gradient: dY where Y > 0 (so X > 0), else 0 — read from Y, with an f32 loop the
 * compiler vectorizes (Relu sits on the largest activations of a CNN). */
#include "../core/optest.h"
#include "unary.h"

static double relu(double x, const kiln_node *n) {
    (void)n;
    return x > 0 ? x : 0;
}

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, true); }

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    if (x->dtype != KILN_F32) return kiln_unary_forward(c, relu);
    /* f32, the hot case in CNN training: a vector loop, split over threads when large */
    const float *xp = x->data; // (n)
    float *yp = c->out[0]->data; // (n)
    const int64_t n = kiln_tensor_numel(x);
#pragma omp parallel for simd if (n >= KILN_UNARY_PAR_MIN) num_threads(kiln_cpu_threads())
    for (int64_t i = 0; i < n; i++) yp[i] = xp[i] > 0 ? xp[i] : 0.0f;
    return KILN_OK;
}

static double deriv(double x, double y, const kiln_unary_args *a) { return y > 0; }
/* dY is read whatever Y is, so that the select becomes a vector mask (a branch on random
 * signs costs far more than the load) */
static void grad_f32(const float *x, const float *y, const float *dy, float *dx, int64_t n,
                     const kiln_unary_args *a) {
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float d = dy[i];
        dx[i] = y[i] > 0 ? d : 0.0f;
    }
}
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_Y, grad_f32};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-1, 0, 2, -3, 4.5, -0.5));
    kiln_tensor *y = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 0, 2, 0, 4.5, 0));
    fails += kiln_optest("Relu", "", 1, &x, 1, &y, 0, 0, "relu f32");
    x = kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(-7, 7, 0));
    y = kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(0, 7, 0));
    fails += kiln_optest("Relu", "", 1, &x, 1, &y, 0, 0, "relu i32");
    /* the threaded f32 loop, against a plain one */
    const int64_t n = 100003;
    x = kt_rand(KILN_F32, 1, KT_DIMS(n), -1, 1, 3);
    y = kt_make(KILN_F32, 1, KT_DIMS(n), NULL);
    if (!x || !y) {
        kiln_tensor_free(x);
        kiln_tensor_free(y);
        return fails + 1;
    }
    const float *xp = x->data; // (n)
    float *yp = y->data;       // (n)
    for (int64_t i = 0; i < n; i++) yp[i] = xp[i] > 0 ? xp[i] : 0;
    fails += kiln_optest("Relu", "", 1, &x, 1, &y, 0, 0, "relu f32 large, threaded");
    fails += kiln_gradcheck("Relu", "", 0, 1,
                            (kiln_tensor *[]){kt_make(KILN_F64, 2, KT_DIMS(2, 3), KT_VALS(-0.9, 0.4, -0.2, 0.7, 1.3, -1.6))},
                            NULL, "relu grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Relu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 101)},
                               1, "relu random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Relu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -2, 2, 1001)},
                               1, "relu [] odd size");
    fails += kiln_optest_sweep("Relu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -2, 2, 1002)},
                               1, "relu [] 7 elements");
    fails += kiln_optest_sweep("Relu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(64, 32, 26, 26), -2, 2, 3001)},
                               1, "relu mnist relu1");
    fails += kiln_optest_sweep("Relu", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 6, 7), -2, 2, 5001)},
                               1, "relu (NHWC) ");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1, .conv_epilogue = true,
    .cuda = "return x > 0.f ? x : 0.f;",
};

const kiln_op_def kiln_op_relu = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "Relu", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
