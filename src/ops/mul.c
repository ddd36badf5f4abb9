/*
 * mul.c — Mul: C = A * B with numpy (multidirectional) broadcasting, opsets 7..14.
 * A and B have one dtype: any float or integer dtype. Integer products wrap modulo
 * 2^bits, as in numpy.
 * Gradient: dA = dY * B, dB = dY * A, each summed back to its input's shape.
 */
#include "../core/optest.h"
#include "binary.h"

KILN_ROW_F32(mul_f32, float, a * b)
static double mul_f64(double a, double b) { return a * b; }
static int64_t mul_i64(int64_t a, int64_t b, bool uns) {
    return (int64_t)((uint64_t)a * (uint64_t)b); /* the low bits are the same signed or not */
}
static const kiln_binary_kernels kernels = {mul_f32, mul_f64, mul_i64};

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_binary_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT);
}
static kiln_status forward(kiln_op_ctx *c) { return kiln_binary_forward(c, &kernels); }

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_binary_grad_check(g);
    for (int k = 0; k < 2 && !st; k++) {
        if (!g->need[k]) continue;
        int in[2] = {g->dy[0], KILN_GRAD_IN(g, 1 - k)};
        st = kiln_binary_grad_input(g, k, kiln_grad_emit(g, NULL, "Mul", 2, in, 1, NULL, false, NULL));
    }
    return st;
}

#ifdef KILN_OPTESTS
static int check(const char *label, kiln_tensor *a, kiln_tensor *b, kiln_tensor *want) {
    kiln_tensor *in[2] = {a, b};
    return kiln_optest("Mul", "", 2, in, 1, &want, 0, 0, label);
}

static int test(void) {
    int fails = 0;
    fails += check("mul f32 (3,1)*(1,2)",
                   kt_make(KILN_F32, 2, KT_DIMS(3, 1), KT_VALS(1, 2, 3)),
                   kt_make(KILN_F32, 2, KT_DIMS(1, 2), KT_VALS(10, -0.5)),
                   kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(10, -0.5, 20, -1, 30, -1.5)));
    fails += check("mul f32 (2,2,2)*(2,1,1)",
                   kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2), KT_VALS(1, 2, 3, 4, 5, 6, 7, 8)),
                   kt_make(KILN_F32, 3, KT_DIMS(2, 1, 1), KT_VALS(2, -1)),
                   kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2), KT_VALS(2, 4, 6, 8, -5, -6, -7, -8)));
    fails += check("mul f64 ()*(2)", kt_scalar(KILN_F64, 0.25),
                   kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(3, -1e-300)),
                   kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(0.75, -2.5e-301)));
    /* 70000^2 = 4900000000 = 605032704 + 2^32 */
    fails += check("mul i32 wraps", kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(70000, -3, 0)),
                   kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(70000, 4, 9)),
                   kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(605032704, -12, 0)));
    fails += check("mul u8 (2)*()", kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(16, 15, 3)),
                   kt_scalar(KILN_U8, 16),
                   kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(0, 240, 48)));

    kiln_tensor *in[2] = {kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), NULL),
                          kt_make(KILN_F32, 2, KT_DIMS(2, 4), NULL)};
    fails += kiln_optest_fails("Mul", "", 2, in, 1, KILN_ERR_SHAPE,
                               "mul (2,3,4)*(2,4) rejected");
    in[0] = kt_make(KILN_F16, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Mul", "", 2, in, 1, KILN_ERR_TYPE, "mul f16*f32 rejected");

    fails += kiln_gradcheck("Mul", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1),
                            kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 2)}, NULL, "mul grad (2,3)*(2,3)");
    fails += kiln_gradcheck("Mul", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 1), -1, 1, 3),
                            kt_rand(KILN_F64, 3, KT_DIMS(2, 1, 4), -1, 1, 4)}, NULL, "mul grad (3,1)*(2,1,4)");
    fails += kiln_gradcheck("Mul", "", 0, 2, (kiln_tensor *[]){kt_scalar(KILN_F64, -1.5),
                            kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 5)}, NULL, "mul grad ()*(2,3)");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 143),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 19), -2, 2, 153)},
                               1, "mul random (2,3,17,19) by (3,1,19)");
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), -2, 2, 163),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 5, 1, 1), -2, 2, 173)},
                               1, "mul random (2,5,7,9) by a channel vector");
    /* squeeze-and-excitation: a map times its (N, C, 1, 1) gate, either side (NHWC in the
     * sweep: the per-pixel-and-channel kernel; 16 channels: vectors in f32 and f16, 6: not) */
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 16, 5, 7), -2, 2, 181),
                                                kt_rand(KILN_F32, 4, KT_DIMS(3, 16, 1, 1), -2, 2, 182)},
                               1, "mul (3,16,5,7) by an SE gate (3,16,1,1)");
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 1, 1), -2, 2, 183),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 4, 3), -2, 2, 184)},
                               1, "mul an SE gate (2,6,1,1) by (2,6,4,3)");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1095),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1096)},
                               1, "mul same shape");
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(1001), -2, 2, 1097),
                                                kt_rand(KILN_F32, 1, KT_DIMS(1001), -2, 2, 1098)},
                               1, "mul same shape odd");
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1099),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 1100)},
                               1, "mul per channel");
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 1101),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1102)},
                               1, "mul per channel swapped");
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1103),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), -2, 2, 1104)},
                               1, "mul row vector");
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1105),
                                                kt_rand(KILN_F32, 2, KT_DIMS(4, 1), -2, 2, 1106)},
                               1, "mul column vector");
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 7), -2, 2, 1107),
                                                kt_rand(KILN_F32, 0, NULL, -2, 2, 1108)},
                               1, "mul scalar");
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 1, 4), -2, 2, 1109),
                                                kt_rand(KILN_F32, 2, KT_DIMS(3, 1), -2, 2, 1110)},
                               1, "mul general");
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(2, 1, 3, 1, 5), -2, 2, 1111),
                                                kt_rand(KILN_F32, 5, KT_DIMS(1, 4, 3, 6, 1), -2, 2, 1112)},
                               1, "mul general 5-D");
    fails += kiln_optest_sweep("Mul", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 8, 5, 7), -2, 2, 5017),
                                                kt_rand(KILN_F32, 3, KT_DIMS(8, 1, 1), -2, 2, 5018)},
                               1, "mul (NHWC) per channel (C,1,1)");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 2,
    .cuda = "return a * b;",
};

const kiln_op_def kiln_op_mul = {
    .precision = KILN_PREC_LOW, .prec_flags = KILN_PREC_EXP_ARG, .layout = KILN_LAYOUT_BINARY,
    .eltwise = &eltwise,
    .name = "Mul", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
