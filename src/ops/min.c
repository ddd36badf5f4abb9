/*
 * min.c — Min: elementwise smallest of 1..N inputs with numpy (multidirectional)
 * broadcasting, opsets 8..13. One dtype for all inputs: any float or integer dtype
 * (integers from opset 12). A NaN in any input gives NaN, as numpy's np.minimum does.
 * Gradient: dY goes to the input that was selected (the one equal to the output),
 * through kiln.MinGrad, then is summed back to its shape. Where several inputs hold
 * the minimum (ties) it goes to the first of them only.
 */
#include "../core/optest.h"
#include "binary.h"

#include <math.h>
#include <string.h>

KILN_ROW_F32(min_f32, float, (a < b || a != a) ? a : b)
static double min_f64(double a, double b) { return (a < b || a != a) ? a : b; }
static int64_t min_i64(int64_t a, int64_t b, bool uns) {
    if (uns) return (uint64_t)a < (uint64_t)b ? a : b;
    return a < b ? a : b;
}
static const kiln_binary_kernels kernels = {min_f32, min_f64, min_i64};

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_variadic_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT);
}
static kiln_status forward(kiln_op_ctx *c) { return kiln_variadic_forward(c, &kernels); }

static kiln_status grad(kiln_grad_ctx *g) { return kiln_select_grad_rule(g, "MinGrad"); }

#ifdef KILN_OPTESTS
static int test_grad(void) {
    int fails = 0;
    /* dY = (1, 2, 3), X0 = (9, 8, 7), X1 = 7 (a scalar): Y = (7, 7, 7); the tie
     * at element 2 goes to X0 */
    kiln_tensor *in[4] = {kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 3)),
                          kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(7, 7, 7)),
                          kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(9, 8, 7)), kt_scalar(KILN_F32, 7)};
    kiln_tensor *want = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0, 0, 3));
    fails += kiln_optest("MinGrad", "index=0", 4, in, 1, &want, 0, 0, "mingrad index 0 takes the tie");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 3));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(7, 7, 7));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(9, 8, 7));
    in[3] = kt_scalar(KILN_F32, 7);
    want = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 0));
    fails += kiln_optest("MinGrad", "index=1", 4, in, 1, &want, 0, 0, "mingrad index 1 broadcast, no tie");
    /* f64, NaN: the output is NaN where an input is, and the first NaN input gets dY */
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.5, -1, 2));
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(NAN, -4, NAN));
    in[2] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(1, 3, NAN));
    in[3] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(NAN, -4, NAN));
    want = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.5, -1, 0));
    fails += kiln_optest("MinGrad", "index=1", 4, in, 1, &want, 0, 0, "mingrad f64 NaN");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("MinGrad", "index=1", 3, in, 1, KILN_ERR_INVALID_ARGUMENT, "mingrad index out of range");
    return fails;
}

/* UINT64 values above INT64_MAX must compare as unsigned. Raw bits: doubles cannot hold
 * them. */
static int test_u64(void) {
    kiln_tensor *in[2] = {kt_make(KILN_U64, 1, KT_DIMS(2), NULL),
                          kt_make(KILN_U64, 1, KT_DIMS(2), NULL)};
    kiln_tensor *want = kt_make(KILN_U64, 1, KT_DIMS(2), NULL);
    if (in[0] && in[1] && want) {
        const uint64_t a[2] = {UINT64_MAX, 5}, b[2] = {7, (uint64_t)1 << 63}, w[2] = {7, 5};
        memcpy(in[0]->data, a, sizeof a);
        memcpy(in[1]->data, b, sizeof b);
        memcpy(want->data, w, sizeof w);
    }
    return kiln_optest("Min", "", 2, in, 1, &want, 0, 0, "min u64 above INT64_MAX");
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *want;
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, -1, 3, 4));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2, 0));
    in[2] = kt_scalar(KILN_F32, 2.5);
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, -1, 2, 0));
    fails += kiln_optest("Min", "", 3, in, 1, &want, 0, 0, "min f32 (2,2),(2),()");

    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(3, 2, 1));
    want = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(3, 2, 1));
    fails += kiln_optest("Min", "", 1, in, 1, &want, 0, 0, "min one input");

    in[0] = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(0.5, -65504, 7));
    in[1] = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(0.25, 1, 7.5));
    want = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(0.25, -65504, 7));
    fails += kiln_optest("Min", "", 2, in, 1, &want, 0, 0, "min f16");

    in[0] = kt_make(KILN_I8, 2, KT_DIMS(2, 1), KT_VALS(-128, 5));
    in[1] = kt_make(KILN_I8, 1, KT_DIMS(3), KT_VALS(127, -3, 6));
    want = kt_make(KILN_I8, 2, KT_DIMS(2, 3), KT_VALS(-128, -128, -128, 5, -3, 5));
    fails += kiln_optest("Min", "", 2, in, 1, &want, 0, 0, "min i8 (2,1),(3)");

    in[0] = kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(255, 0, 9));
    in[1] = kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(254, 1, 9));
    want = kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(254, 0, 9));
    fails += kiln_optest("Min", "", 2, in, 1, &want, 0, 0, "min u8");
    fails += test_u64();

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Min", "", 2, in, 1, KILN_ERR_SHAPE, "min (2,3),(2) rejected");
    in[0] = kt_make(KILN_I32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(2), NULL);
    in[2] = kt_make(KILN_I64, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Min", "", 3, in, 1, KILN_ERR_TYPE, "min i32,i32,i64 rejected");

    /* random inputs: no ties */
    fails += kiln_gradcheck("Min", "", 0, 3, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1),
                            kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 2), kt_rand(KILN_F64, 2, KT_DIMS(2, 1), -1, 1, 3)},
                            NULL, "min grad (2,3),(3),(2,1)");
    fails += kiln_gradcheck("Min", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 4),
                            kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 5)}, NULL, "min grad (3,4),(3,4)");
    fails += kiln_gradcheck("Min", "", 0, 2, (kiln_tensor *[]){kt_scalar(KILN_F64, 0.1),
                            kt_rand(KILN_F64, 2, KT_DIMS(2, 4), -1, 1, 6)}, NULL, "min grad (),(2,4)");
    fails += kiln_gradcheck("Min", "", 0, 1, (kiln_tensor *[]){kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 7)},
                            NULL, "min grad one input");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Min", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 145),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 19), -2, 2, 155)},
                               1, "min random (2,3,17,19) by (3,1,19)");
    fails += kiln_optest_sweep("Min", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), -2, 2, 165),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 5, 1, 1), -2, 2, 175)},
                               1, "min random (2,5,7,9) by a channel vector");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Min", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1167),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1168)},
                               1, "min same shape");
    fails += kiln_optest_sweep("Min", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(1001), -2, 2, 1169),
                                                kt_rand(KILN_F32, 1, KT_DIMS(1001), -2, 2, 1170)},
                               1, "min same shape odd");
    fails += kiln_optest_sweep("Min", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1171),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 1172)},
                               1, "min per channel");
    fails += kiln_optest_sweep("Min", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 1173),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1174)},
                               1, "min per channel swapped");
    fails += kiln_optest_sweep("Min", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1175),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), -2, 2, 1176)},
                               1, "min row vector");
    fails += kiln_optest_sweep("Min", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1177),
                                                kt_rand(KILN_F32, 2, KT_DIMS(4, 1), -2, 2, 1178)},
                               1, "min column vector");
    fails += kiln_optest_sweep("Min", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 7), -2, 2, 1179),
                                                kt_rand(KILN_F32, 0, NULL, -2, 2, 1180)},
                               1, "min scalar");
    fails += kiln_optest_sweep("Min", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 1, 4), -2, 2, 1181),
                                                kt_rand(KILN_F32, 2, KT_DIMS(3, 1), -2, 2, 1182)},
                               1, "min general");
    fails += kiln_optest_sweep("Min", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(2, 1, 3, 1, 5), -2, 2, 1183),
                                                kt_rand(KILN_F32, 5, KT_DIMS(1, 4, 3, 6, 1), -2, 2, 1184)},
                               1, "min general 5-D");
    fails += kiln_optest_sweep("Min", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 4), -2, 2, 1189),
                                                kt_rand(KILN_F32, 2, KT_DIMS(3, 1), -2, 2, 1190),
                                                kt_rand(KILN_F32, 1, KT_DIMS(4), -2, 2, 1191)},
                               1, "min three inputs");
    fails += kiln_optest_sweep("Min", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 5), -2, 2, 1192)},
                               1, "min one input");
    fails += kiln_optest_sweep("Min", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 5015),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 5016)},
                               1, "min (NHWC) two inputs");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_min_grad = {
    .precision = KILN_PREC_FP32, .layout = KILN_LAYOUT_BINARY, /* follows its forward into NHWC */
    .name = "MinGrad", .domain = "kiln", .min_inputs = 3, .max_inputs = -1, .min_outputs = 1,
    .max_outputs = 1, .infer = kiln_select_grad_infer, .cpu_forward = kiln_select_grad_forward,
    .test = KILN_OP_TESTS(test_grad),
};

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 2,
    .cuda = "return (a < b || a != a) ? a : b;",
};

const kiln_op_def kiln_op_min = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_BINARY, .eltwise = &eltwise,
    .name = "Min", .min_inputs = 1, .max_inputs = -1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
