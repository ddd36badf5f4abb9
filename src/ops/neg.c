/* neg.c — Neg: y = -x. Float and signed integer dtypes (unsigned are rejected, as in the
 * spec); opsets 6 and 13 (bf16). Integers are exact; like numpy, the most negative value
 * maps to itself.
 * Gradient: -dY. */
#include "../core/optest.h"
#include "unary.h"

static double neg(double x, const kiln_unary_args *a) { return -x; }
/* Negation in uint64 wraps instead of overflowing. */
static int64_t neg_int(int64_t x) { return (int64_t)(0 - (uint64_t)x); }

static kiln_status infer(kiln_op_ctx *c) {
    kiln_dtype dt = c->in[0]->dtype;
    KILN_OP_CHECK(c, kiln_dtype_is_signed(dt), KILN_ERR_TYPE,
                  "input dtype %s is not supported (floats and signed integers only)",
                  kiln_dtype_name(dt));
    return kiln_unary_infer(c, true);
}

static kiln_status forward(kiln_op_ctx *c) { return kiln_unary_forward_args(c, neg, neg_int, NULL); }

static double deriv(double x, double y, const kiln_unary_args *a) { return -1; }
static const kiln_unary_grad_def grad_def = {deriv, NULL, 0, NULL};

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-1.5, 0, 2.25, 3e38));
    kiln_tensor *y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1.5, 0, -2.25, -3e38));
    fails += kiln_optest("Neg", "", 1, &x, 1, &y, 0, 0, "neg f32");
    x = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(-5, 5, 0));
    y = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(5, -5, 0));
    fails += kiln_optest("Neg", "", 1, &x, 1, &y, 0, 0, "neg i64");
    x = kt_make(KILN_I8, 1, KT_DIMS(3), KT_VALS(-128, 127, -1));
    y = kt_make(KILN_I8, 1, KT_DIMS(3), KT_VALS(-128, -127, 1));
    fails += kiln_optest("Neg", "", 1, &x, 1, &y, 0, 0, "neg i8 wraps like numpy");
    x = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(1e-310, -2.5));
    y = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(-1e-310, 2.5));
    fails += kiln_optest("Neg", "", 1, &x, 1, &y, 0, 0, "neg f64");
    x = kt_make(KILN_U8, 1, KT_DIMS(2), KT_VALS(1, 2));
    fails += kiln_optest_fails("Neg", "", 1, &x, 1, KILN_ERR_TYPE, "neg rejects u8");
    fails += kiln_gradcheck("Neg", "", 0, 1,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -2, 2, 1)},
                            NULL, "neg grad");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Neg", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 115)},
                               1, "neg random 2x3x17x19");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Neg", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 33, 17), -2, 2, 1045)},
                               1, "neg [] odd size");
    fails += kiln_optest_sweep("Neg", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(7), -2, 2, 1046)},
                               1, "neg [] 7 elements");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 1,
    .cuda = "return -x;",
};

const kiln_op_def kiln_op_neg = {
    .precision = KILN_PREC_LOW, .prec_flags = KILN_PREC_EXP_ARG, .layout = KILN_LAYOUT_UNARY,
    .eltwise = &eltwise,
    .name = "Neg", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = kiln_unary_grad,
    .family = &grad_def,
};
