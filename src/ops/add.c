/*
 * add.c — Add: C = A + B with numpy (multidirectional) broadcasting, opsets 7..14.
 * A and B have one dtype: any float (f16, bf16, f32, f64) or integer dtype. Integer sums
 * wrap modulo 2^bits (two's complement), as in C on unsigned values and numpy.
 * Gradient: dA = dY and dB = dY, each summed back to its input's shape.
 */
#include "../core/optest.h"
#include "binary.h"

KILN_ROW_F32(add_f32, float, a + b)
static double add_f64(double a, double b) { return a + b; }
static int64_t add_i64(int64_t a, int64_t b, bool uns) {
    return (int64_t)((uint64_t)a + (uint64_t)b); /* unsigned: wraps without UB */
}
static const kiln_binary_kernels kernels = {add_f32, add_f64, add_i64};

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_binary_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT);
}
static kiln_status forward(kiln_op_ctx *c) { return kiln_binary_forward(c, &kernels); }

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_binary_grad_check(g);
    return st ? st : kiln_binary_grad_all(g, g->dy[0]);
}

#ifdef KILN_OPTESTS
static int check(const char *label, kiln_tensor *a, kiln_tensor *b, kiln_tensor *want) {
    kiln_tensor *in[2] = {a, b};
    return kiln_optest("Add", "", 2, in, 1, &want, 0, 0, label);
}

/* A large case that takes the chunked, multi-threaded path of the broadcast plan:
 * (4,3,100,300) + (3,1,1), checked against a naive index computation. */
static int test_large(void) {
    const int64_t N = 4, C = 3, HW = 100 * 300;
    kiln_tensor *a = kt_rand(KILN_F32, 4, KT_DIMS(4, 3, 100, 300), -1, 1, 7);
    kiln_tensor *b = kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -10, 10, 8);
    kiln_tensor *want = kt_make(KILN_F32, 4, KT_DIMS(4, 3, 100, 300), NULL);
    if (!a || !b || !want) {
        kiln_tensor_free(a);
        kiln_tensor_free(b);
        kiln_tensor_free(want);
        return 1;
    }
    const float *ap = a->data, *bp = b->data; // (N,C,HW), (C)
    float *wp = want->data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t i = 0; i < HW; i++) {
                int64_t k = (n * C + ch) * HW + i;
                wp[k] = ap[k] + bp[ch];
            }
    return check("add f32 large (4,3,100,300)+(3,1,1)", a, b, want);
}

static int test(void) {
    int fails = 0;
    fails += check("add f32 (2,3)+(3)",
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6)),
                   kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(10, 20, 30)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(11, 22, 33, 14, 25, 36)));
    fails += check("add f32 (2,1)+(1,3)",
                   kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(1, 2)),
                   kt_make(KILN_F32, 2, KT_DIMS(1, 3), KT_VALS(10, 20, 30)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(11, 21, 31, 12, 22, 32)));
    fails += check("add f32 (2,1,2)+(3,1)",
                   kt_make(KILN_F32, 3, KT_DIMS(2, 1, 2), KT_VALS(1, 2, 3, 4)),
                   kt_make(KILN_F32, 2, KT_DIMS(3, 1), KT_VALS(10, 20, 30)),
                   kt_make(KILN_F32, 3, KT_DIMS(2, 3, 2),
                           KT_VALS(11, 12, 21, 22, 31, 32, 13, 14, 23, 24, 33, 34)));
    fails += check("add f32 scalar+scalar", kt_scalar(KILN_F32, 1.5), kt_scalar(KILN_F32, 2.25),
                   kt_scalar(KILN_F32, 3.75));
    /* 1.5 + 2048 = 2049.5 is not an f16: the spacing there is 2, so it rounds to 2050. */
    fails += check("add f16 rounding",
                   kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(0.5, 1.5, -2)),
                   kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(0.25, 2048, 1)),
                   kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(0.75, 2050, -1)));
    fails += check("add f64 (3)+()", kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.1, -1, 1e300)),
                   kt_scalar(KILN_F64, 0.2),
                   kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.1 + 0.2, -0.8, 1e300)));
    fails += check("add u8 wraps", kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(200, 255, 0)),
                   kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(100, 1, 0)),
                   kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(44, 0, 0)));
    fails += check("add i64 (2,2)+()",
                   kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(-5, 0, 7, 1e12)),
                   kt_scalar(KILN_I64, 3),
                   kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(-2, 3, 10, 1000000000003)));
    fails += test_large();

    kiln_tensor *in[2] = {kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL),
                          kt_make(KILN_F32, 1, KT_DIMS(4), NULL)};
    fails += kiln_optest_fails("Add", "", 2, in, 1, KILN_ERR_SHAPE, "add (2,3)+(4) rejected");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Add", "", 2, in, 1, KILN_ERR_TYPE, "add f32+i32 rejected");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Add", "", 2, in, 1, KILN_ERR_TYPE, "add bool rejected");

    fails += kiln_gradcheck("Add", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1),
                            kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 2)}, NULL, "add grad (2,3)+(2,3)");
    fails += kiln_gradcheck("Add", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 1, 3), -1, 1, 3),
                            kt_rand(KILN_F64, 2, KT_DIMS(4, 1), -1, 1, 4)}, NULL, "add grad (2,1,3)+(4,1)");
    fails += kiln_gradcheck("Add", "", 0, 2, (kiln_tensor *[]){kt_scalar(KILN_F64, 0.5),
                            kt_rand(KILN_F64, 2, KT_DIMS(3, 2), -1, 1, 5)}, NULL, "add grad ()+(3,2)");
    /* a constant operand needs no gradient */
    fails += kiln_gradcheck("Add", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 6),
                            kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 7)}, (const bool[]){true, false},
                            "add grad (2,3)+(3) w.r.t. A only");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 141),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 19), -2, 2, 151)},
                               1, "add random (2,3,17,19) by (3,1,19)");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), -2, 2, 161),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 5, 1, 1), -2, 2, 171)},
                               1, "add random (2,5,7,9) by a channel vector");
    /* both operands contiguous along a last dim of a vector's multiple (CUDA's binary_inner):
     * swin's window mask, a product's bias in front, one 4-float multiple (not 8 halfs) */
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(2, 3, 2, 4, 16), -2, 2, 181),
                                                kt_rand(KILN_F32, 5, KT_DIMS(1, 3, 1, 4, 16), -2, 2, 182)},
                               1, "add random (2,3,2,4,16) by a window mask (1,3,1,4,16)");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(24), -2, 2, 183),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 24), -2, 2, 184)},
                               1, "add random bias (24) before (3,5,24)");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 12), -2, 2, 185),
                                                kt_rand(KILN_F32, 3, KT_DIMS(1, 3, 12), -2, 2, 186)},
                               1, "add random (2,3,12) by (1,3,12)");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1059),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1060)},
                               1, "add same shape");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(1001), -2, 2, 1061),
                                                kt_rand(KILN_F32, 1, KT_DIMS(1001), -2, 2, 1062)},
                               1, "add same shape odd");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1063),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 1064)},
                               1, "add per channel");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 1065),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1066)},
                               1, "add per channel swapped");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1067),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), -2, 2, 1068)},
                               1, "add row vector");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1069),
                                                kt_rand(KILN_F32, 2, KT_DIMS(4, 1), -2, 2, 1070)},
                               1, "add column vector");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 7), -2, 2, 1071),
                                                kt_rand(KILN_F32, 0, NULL, -2, 2, 1072)},
                               1, "add scalar");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 1, 4), -2, 2, 1073),
                                                kt_rand(KILN_F32, 2, KT_DIMS(3, 1), -2, 2, 1074)},
                               1, "add general");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(2, 1, 3, 1, 5), -2, 2, 1075),
                                                kt_rand(KILN_F32, 5, KT_DIMS(1, 4, 3, 6, 1), -2, 2, 1076)},
                               1, "add general 5-D");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 6, 7), -2, 2, 5008),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 6, 7), -2, 2, 5009)},
                               1, "add (NHWC) same shape");
    fails += kiln_optest_sweep("Add", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 3, 3), -2, 2, 5019),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 16, 1, 1), -2, 2, 5020)},
                               1, "add (NHWC) per channel (1,C,1,1)");
    return fails;
}
#endif /* KILN_OPTESTS */

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 2,
    .cuda = "return a + b;",
};

const kiln_op_def kiln_op_add = {
    .precision = KILN_PREC_LOW, .prec_flags = KILN_PREC_EXP_ARG, .layout = KILN_LAYOUT_BINARY,
    .eltwise = &eltwise,
    .name = "Add", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
