/* abs.c — Abs: y = |x|. Float and all integer dtypes; opsets 6 and 13 (bf16). Integers are
 * exact (no trip through double); like numpy, the most negative signed value maps to
 * itself, and unsigned inputs are copied.
 * Gradient: dY * sign(X) (0 at X = 0). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double abs_fn(double x, const kiln_unary_args *a) { return fabs(x); }
/* Negation in uint64 wraps instead of overflowing (INT64_MIN stays INT64_MIN). */
static int64_t abs_int(int64_t x) { return x < 0 ? (int64_t)(0 - (uint64_t)x) : x; }
static int64_t identity(int64_t x) { return x; }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, true); }

static kiln_status forward(kiln_op_ctx *c) {
    bool is_signed = kiln_dtype_is_signed(c->in[0]->dtype);
    return kiln_unary_forward_args(c, abs_fn, is_signed ? abs_int : identity, NULL);
}

static double deriv(double x, double y, const kiln_unary_args *a) { return x > 0 ? 1 : x < 0 ? -1 : 0; }
static const kiln_unary_grad_def grad_def = {deriv, NULL, KILN_UNARY_X, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-1.5, 0, 2.25, -1e-30));
    kiln_tensor *y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1.5, 0, 2.25, 1e-30));
    fails += kiln_optest("Abs", "", 1, &x, 1, &y, 0, 0, "abs f32");
    x = kt_make(KILN_I32, 1, KT_DIMS(4), KT_VALS(-7, 7, 0, -2147483647));
    y = kt_make(KILN_I32, 1, KT_DIMS(4), KT_VALS(7, 7, 0, 2147483647));
    fails += kiln_optest("Abs", "", 1, &x, 1, &y, 0, 0, "abs i32");
    x = kt_make(KILN_I8, 1, KT_DIMS(3), KT_VALS(-128, -127, 5));
    y = kt_make(KILN_I8, 1, KT_DIMS(3), KT_VALS(-128, 127, 5));
    fails += kiln_optest("Abs", "", 1, &x, 1, &y, 0, 0, "abs i8 wraps like numpy");
    x = kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(0, 200, 255));
    y = kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(0, 200, 255));
    fails += kiln_optest("Abs", "", 1, &x, 1, &y, 0, 0, "abs u8");
    x = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(-0.333, 65504));
    y = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.333, 65504));
    fails += kiln_optest("Abs", "", 1, &x, 1, &y, 0, 0, "abs f16");
    x = kt_make(KILN_BOOL, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Abs", "", 1, &x, 1, KILN_ERR_TYPE, "abs rejects bool");
    fails += kiln_unary_gradcheck("Abs", "", 0, 6, KT_VALS(-0.9, 0.4, -0.2, 0.7, 1.3, -1.6),
                                  "abs grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Abs", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 114)},
                               1, "abs random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Abs", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -2, 2, 1043)},
                               1, "abs [] odd size");
    fails += kiln_optest_sweep("Abs", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -2, 2, 1044)},
                               1, "abs [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1,
    .cuda = "return fabsf(x);",
};

const kiln_op_def kiln_op_abs = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY, .eltwise = &eltwise,
    .name = "Abs", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
