/*
 * div.c — Div: C = A / B with numpy (multidirectional) broadcasting, opsets 7..14.
 * A and B have one dtype: any float or integer dtype.
 *   - Floats follow IEEE 754 (x/0 is ±inf, 0/0 is NaN).
 *   - Integers truncate toward zero, as C and ONNX Runtime do (-7/2 = -3; numpy's //
 *     would floor to -4). For unsigned dtypes both agree (test_div_uint8).
 *   - Integer division by zero is undefined in ONNX and traps in C; kiln defines it as 0.
 *   - INT_MIN / -1 overflows; it wraps like the other integer ops (INT8 -128 / -1 = -128).
 * Gradient (floats): with T = dY / B, dA = T and dB = -T * C (= -dY * A / B^2), each
 * summed back to its input's shape.
 */
#include "../core/optest.h"
#include "binary.h"

#include <string.h>

KILN_ROW_F32(div_f32, float, a / b)
static double div_f64(double a, double b) { return a / b; }
static int64_t div_i64(int64_t a, int64_t b, bool uns) {
    if (b == 0) return 0;
    if (uns) return (int64_t)((uint64_t)a / (uint64_t)b);
    if (b == -1) return (int64_t)(0 - (uint64_t)a); /* INT64_MIN / -1 would trap */
    return a / b;                                    /* C99: truncates toward zero */
}
static const kiln_binary_kernels kernels = {div_f32, div_f64, div_i64};

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_binary_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT);
}
static kiln_status forward(kiln_op_ctx *c) { return kiln_binary_forward(c, &kernels); }

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_binary_grad_check(g);
    if (st) return st;
    int in[2] = {g->dy[0], KILN_GRAD_IN(g, 1)};
    int t = kiln_grad_emit(g, NULL, "Div", 2, in, 1, NULL, false, NULL);
    if (g->need[0]) st = kiln_binary_grad_input(g, 0, t);
    if (!st && g->need[1]) {
        int tc[2] = {t, KILN_GRAD_OUT(g, 0)};
        st = kiln_binary_grad_input(g, 1, t < 0 ? -1 : kiln_grad_emit(g, NULL, "Mul", 2, tc, 1, NULL, false, NULL));
        int summed = g->dx[1];
        if (!st) g->dx[1] = kiln_grad_emit(g, NULL, "Neg", 1, &summed, 1, NULL, false, NULL);
        if (!st && g->dx[1] < 0) st = KILN_ERR_OUT_OF_MEMORY;
    }
    return st;
}

#ifdef KILN_OPTESTS
static int check(const char *label, kiln_tensor *a, kiln_tensor *b, kiln_tensor *want) {
    kiln_tensor *in[2] = {a, b};
    return kiln_optest("Div", "", 2, in, 1, &want, 0, 0, label);
}

/* UINT64 values above INT64_MAX divide as unsigned: (2^64-2)/2 = 2^63-1. Built from raw
 * bits since doubles cannot hold them. */
static int test_u64(void) {
    kiln_tensor *a = kt_make(KILN_U64, 1, KT_DIMS(2), NULL);
    kiln_tensor *b = kt_make(KILN_U64, 1, KT_DIMS(2), NULL);
    kiln_tensor *w = kt_make(KILN_U64, 1, KT_DIMS(2), NULL);
    if (a && b && w) {
        const uint64_t av[2] = {UINT64_MAX - 1, UINT64_MAX}, bv[2] = {2, UINT64_MAX};
        const uint64_t wv[2] = {(uint64_t)INT64_MAX, 1};
        memcpy(a->data, av, sizeof av);
        memcpy(b->data, bv, sizeof bv);
        memcpy(w->data, wv, sizeof wv);
    }
    return check("div u64 above INT64_MAX", a, b, w);
}

static int test(void) {
    int fails = 0;
    fails += check("div f32 (2,3)/(3)",
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6)),
                   kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2, 4, -8)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0.5, 0.5, -0.375, 2, 1.25, -0.75)));
    fails += check("div f32 ()/(2)", kt_scalar(KILN_F32, 3),
                   kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(4, -0.5)),
                   kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0.75, -6)));
    fails += check("div f16 (2)/()", kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(1, -3)),
                   kt_scalar(KILN_F16, 3),
                   /* 1/3 in f16 is 0x3555 = 1365/4096 */
                   kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(1365.0 / 4096, -1)));
    fails += check("div u8 (as test_div_uint8)",
                   kt_make(KILN_U8, 1, KT_DIMS(5), KT_VALS(16, 6, 0, 255, 3)),
                   kt_make(KILN_U8, 1, KT_DIMS(5), KT_VALS(11, 5, 23, 2, 1)),
                   kt_make(KILN_U8, 1, KT_DIMS(5), KT_VALS(1, 1, 0, 127, 3)));
    fails += check("div i32 truncates, x/0 = 0",
                   kt_make(KILN_I32, 1, KT_DIMS(6), KT_VALS(-7, 7, -7, 5, 0, -5)),
                   kt_make(KILN_I32, 1, KT_DIMS(6), KT_VALS(2, -2, -2, 0, 3, 0)),
                   kt_make(KILN_I32, 1, KT_DIMS(6), KT_VALS(-3, -3, 3, 0, 0, 0)));
    fails += check("div i8 (2,2)/(2) with -128/-1",
                   kt_make(KILN_I8, 2, KT_DIMS(2, 2), KT_VALS(-128, 100, 9, -9)),
                   kt_make(KILN_I8, 1, KT_DIMS(2), KT_VALS(-1, 7)),
                   kt_make(KILN_I8, 2, KT_DIMS(2, 2), KT_VALS(-128, 14, -9, -1)));
    fails += check("div i64 INT64_MIN/-1",
                   kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-9223372036854775808.0, 1e15)),
                   kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-1, -1)),
                   kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-9223372036854775808.0, -1e15)));
    fails += test_u64();

    kiln_tensor *in[2] = {kt_make(KILN_F32, 1, KT_DIMS(3), NULL),
                          kt_make(KILN_F32, 1, KT_DIMS(2), NULL)};
    fails += kiln_optest_fails("Div", "", 2, in, 1, KILN_ERR_SHAPE, "div (3)/(2) rejected");
    in[0] = kt_make(KILN_U8, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_I8, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Div", "", 2, in, 1, KILN_ERR_TYPE, "div u8/i8 rejected");

    /* divisors away from 0 */
    fails += kiln_gradcheck("Div", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1),
                            kiln_binary_rand_signed(2, KT_DIMS(2, 3), 0.5, 2, 2)}, NULL, "div grad (2,3)/(2,3)");
    fails += kiln_gradcheck("Div", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 1, 3), -1, 1, 3),
                            kiln_binary_rand_signed(2, KT_DIMS(4, 1), 0.5, 2, 4)}, NULL, "div grad (2,1,3)/(4,1)");
    fails += kiln_gradcheck("Div", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 2), -1, 1, 5),
                            kt_scalar(KILN_F64, -0.75)}, NULL, "div grad (3,2)/()");
    fails += kiln_gradcheck("Div", "", 0, 2, (kiln_tensor *[]){kt_scalar(KILN_F64, 2.5),
                            kiln_binary_rand_signed(1, KT_DIMS(4), 0.5, 2, 6)}, (const bool[]){false, true},
                            "div grad ()/(4) w.r.t. B only");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Div", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 146),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 19), 0.5, 2, 156)},
                               1, "div random (2,3,17,19) by (3,1,19)");
    fails += kiln_optest_sweep("Div", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), -2, 2, 166),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 5, 1, 1), 0.5, 2, 176)},
                               1, "div random (2,5,7,9) by a channel vector");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Div", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1113),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), 0.5, 2, 1114)},
                               1, "div same shape");
    fails += kiln_optest_sweep("Div", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(1001), -2, 2, 1115),
                                                kt_rand(KILN_F32, 1, KT_DIMS(1001), 0.5, 2, 1116)},
                               1, "div same shape odd");
    fails += kiln_optest_sweep("Div", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1117),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), 0.5, 2, 1118)},
                               1, "div per channel");
    fails += kiln_optest_sweep("Div", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 1119),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), 0.5, 2, 1120)},
                               1, "div per channel swapped");
    fails += kiln_optest_sweep("Div", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1121),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), 0.5, 2, 1122)},
                               1, "div row vector");
    fails += kiln_optest_sweep("Div", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1123),
                                                kt_rand(KILN_F32, 2, KT_DIMS(4, 1), 0.5, 2, 1124)},
                               1, "div column vector");
    fails += kiln_optest_sweep("Div", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 7), -2, 2, 1125),
                                                kt_rand(KILN_F32, 0, NULL, 0.5, 2, 1126)},
                               1, "div scalar");
    fails += kiln_optest_sweep("Div", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 1, 4), -2, 2, 1127),
                                                kt_rand(KILN_F32, 2, KT_DIMS(3, 1), 0.5, 2, 1128)},
                               1, "div general");
    fails += kiln_optest_sweep("Div", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(2, 1, 3, 1, 5), -2, 2, 1129),
                                                kt_rand(KILN_F32, 5, KT_DIMS(1, 4, 3, 6, 1), 0.5, 2, 1130)},
                               1, "div general 5-D");
    fails += kiln_optest_sweep("Div", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 5021),
                                                kt_rand(KILN_F32, 0, NULL, 0.5, 2, 5022)},
                               1, "div (NHWC) scalar");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 2,
    .cuda = "return a / b;",
};

const kiln_op_def kiln_op_div = {
    .precision = KILN_PREC_LOW, .prec_flags = KILN_PREC_EXP_ARG, .layout = KILN_LAYOUT_BINARY,
    .eltwise = &eltwise,
    .name = "Div", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
