/*
 * sub.c — Sub: C = A - B with numpy (multidirectional) broadcasting, opsets 7..14.
 * A and B have one dtype: any float or integer dtype. Integer differences wrap modulo
 * 2^bits (unsigned 3 - 5 is 254 in u8), as in numpy.
 * Gradient: dA = dY, dB = -dY, each summed back to its input's shape.
 */
#include "../core/optest.h"
#include "binary.h"

KILN_ROW_F32(sub_f32, float, a - b)
static double sub_f64(double a, double b) { return a - b; }
static int64_t sub_i64(int64_t a, int64_t b, bool uns) {
    return (int64_t)((uint64_t)a - (uint64_t)b); /* unsigned: wraps without UB */
}
static const kiln_binary_kernels kernels = {sub_f32, sub_f64, sub_i64};

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_binary_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT);
}
static kiln_status forward(kiln_op_ctx *c) { return kiln_binary_forward(c, &kernels); }

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_binary_grad_check(g);
    if (!st && g->need[0]) st = kiln_binary_grad_input(g, 0, g->dy[0]);
    if (!st && g->need[1]) st = kiln_binary_grad_input(g, 1, g->dy[0]);
    if (!st && g->need[1]) {
        /* negated after summing back: the summed tensor is the smaller one */
        int summed = g->dx[1];
        g->dx[1] = kiln_grad_emit(g, NULL, "Neg", 1, &summed, 1, NULL, false, NULL);
        if (g->dx[1] < 0) st = KILN_ERR_OUT_OF_MEMORY;
    }
    return st;
}

#ifdef KILN_OPTESTS
static int check(const char *label, kiln_tensor *a, kiln_tensor *b, kiln_tensor *want) {
    kiln_tensor *in[2] = {a, b};
    return kiln_optest("Sub", "", 2, in, 1, &want, 0, 0, label);
}

static int test(void) {
    int fails = 0;
    fails += check("sub f32 (2,3)-(3)",
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6)),
                   kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(10, 20, 30)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-9, -18, -27, -6, -15, -24)));
    fails += check("sub f32 ()-(2,2) (scalar on the left)", kt_scalar(KILN_F32, 1),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(0.5, 2, -3, 0)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(0.5, -1, 4, 1)));
    fails += check("sub bf16 (2,1)-(2)",
                   kt_make(KILN_BF16, 2, KT_DIMS(2, 1), KT_VALS(1, 256)),
                   kt_make(KILN_BF16, 1, KT_DIMS(2), KT_VALS(0.5, 1)),
                   /* bf16 keeps 8 significant bits: 255 is exact, 255.5 is a tie between
                    * 255 (odd) and 256 (even) and rounds to 256 */
                   kt_make(KILN_BF16, 2, KT_DIMS(2, 2), KT_VALS(0.5, 0, 256, 255)));
    fails += check("sub u8 wraps", kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(3, 255, 0)),
                   kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(5, 255, 1)),
                   kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(254, 0, 255)));
    fails += check("sub i32 (2,2)-(2,1)",
                   kt_make(KILN_I32, 2, KT_DIMS(2, 2), KT_VALS(10, 20, -30, 40)),
                   kt_make(KILN_I32, 2, KT_DIMS(2, 1), KT_VALS(1, -2)),
                   kt_make(KILN_I32, 2, KT_DIMS(2, 2), KT_VALS(9, 19, -28, 42)));

    kiln_tensor *in[2] = {kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL),
                          kt_make(KILN_F32, 2, KT_DIMS(3, 2), NULL)};
    fails += kiln_optest_fails("Sub", "", 2, in, 1, KILN_ERR_SHAPE, "sub (2,3)-(3,2) rejected");
    in[0] = kt_make(KILN_I64, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Sub", "", 2, in, 1, KILN_ERR_TYPE, "sub i64-i32 rejected");

    fails += kiln_gradcheck("Sub", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1),
                            kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 2)}, NULL, "sub grad (2,3)-(2,3)");
    fails += kiln_gradcheck("Sub", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(4, 1), -1, 1, 3),
                            kt_rand(KILN_F64, 3, KT_DIMS(2, 1, 3), -1, 1, 4)}, NULL, "sub grad (4,1)-(2,1,3)");
    fails += kiln_gradcheck("Sub", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 2), -1, 1, 5),
                            kt_scalar(KILN_F64, 0.25)}, NULL, "sub grad (3,2)-()");
    fails += kiln_gradcheck("Sub", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 6),
                            kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 7)}, (const bool[]){false, true},
                            "sub grad (3)-(2,3) w.r.t. B only");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 142),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 19), -2, 2, 152)},
                               1, "sub random (2,3,17,19) by (3,1,19)");
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), -2, 2, 162),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 5, 1, 1), -2, 2, 172)},
                               1, "sub random (2,5,7,9) by a channel vector");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1077),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1078)},
                               1, "sub same shape");
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(1001), -2, 2, 1079),
                                                kt_rand(KILN_F32, 1, KT_DIMS(1001), -2, 2, 1080)},
                               1, "sub same shape odd");
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1081),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 1082)},
                               1, "sub per channel");
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 1083),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1084)},
                               1, "sub per channel swapped");
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1085),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), -2, 2, 1086)},
                               1, "sub row vector");
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1087),
                                                kt_rand(KILN_F32, 2, KT_DIMS(4, 1), -2, 2, 1088)},
                               1, "sub column vector");
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 7), -2, 2, 1089),
                                                kt_rand(KILN_F32, 0, NULL, -2, 2, 1090)},
                               1, "sub scalar");
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 1, 4), -2, 2, 1091),
                                                kt_rand(KILN_F32, 2, KT_DIMS(3, 1), -2, 2, 1092)},
                               1, "sub general");
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(2, 1, 3, 1, 5), -2, 2, 1093),
                                                kt_rand(KILN_F32, 5, KT_DIMS(1, 4, 3, 6, 1), -2, 2, 1094)},
                               1, "sub general 5-D");
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 4, 5, 6), -2, 2, 5010),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 4, 5, 6), -2, 2, 5011)},
                               1, "sub (NHWC) broadcast batch");
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 4, 5), -2, 2, 5023),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 1, 4, 5), -2, 2, 5024)},
                               1, "sub (NHWC) (N,1,H,W) map");
    fails += kiln_optest_sweep("Sub", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(5, 1, 1), -2, 2, 5027),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 4, 3), -2, 2, 5028)},
                               1, "sub (NHWC) per channel on the left");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 2,
    .cuda = "return a - b;",
};

const kiln_op_def kiln_op_sub = {
    .precision = KILN_PREC_LOW, .prec_flags = KILN_PREC_EXP_ARG, .layout = KILN_LAYOUT_BINARY,
    .eltwise = &eltwise,
    .name = "Sub", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
