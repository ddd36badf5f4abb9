/*
 * max.c — Max: elementwise largest of 1..N inputs with numpy (multidirectional)
 * broadcasting, opsets 8..13. One dtype for all inputs: any float or integer dtype
 * (integers from opset 12). A NaN in any input gives NaN, as numpy's np.maximum does.
 * Gradient: dY goes to the input that was selected (the one equal to the output),
 * through kiln.MaxGrad, then is summed back to its shape. Where several inputs hold
 * the maximum (ties) it goes to the first of them only.
 */
#include "../core/optest.h"
#include "binary.h"

#include <math.h>
#include <string.h>

KILN_ROW_F32(max_f32, float, (a > b || a != a) ? a : b)
static double max_f64(double a, double b) { return (a > b || a != a) ? a : b; }
static int64_t max_i64(int64_t a, int64_t b, bool uns) {
    if (uns) return (uint64_t)a > (uint64_t)b ? a : b;
    return a > b ? a : b;
}
static const kiln_binary_kernels kernels = {max_f32, max_f64, max_i64};

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_variadic_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT);
}
static kiln_status forward(kiln_op_ctx *c) { return kiln_variadic_forward(c, &kernels); }

static kiln_status grad(kiln_grad_ctx *g) { return kiln_select_grad_rule(g, "MaxGrad"); }

#ifdef KILN_OPTESTS
static int test_grad(void) {
    int fails = 0;
    /* dY = (1, 2, 3), X0 = (5, 6, 7), X1 = 7 (a scalar): Y = (7, 7, 7); the tie
     * at element 2 goes to X0 */
    kiln_tensor *in[4] = {kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 3)),
                          kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(7, 7, 7)),
                          kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(5, 6, 7)), kt_scalar(KILN_F32, 7)};
    kiln_tensor *want = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0, 0, 3));
    fails += kiln_optest("MaxGrad", "index=0", 4, in, 1, &want, 0, 0, "maxgrad index 0 takes the tie");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 3));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(7, 7, 7));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(5, 6, 7));
    in[3] = kt_scalar(KILN_F32, 7);
    want = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 0));
    fails += kiln_optest("MaxGrad", "index=1", 4, in, 1, &want, 0, 0, "maxgrad index 1 broadcast, no tie");
    /* f64, NaN: the output is NaN where an input is, and the first NaN input gets dY */
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.5, -1, 2));
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(NAN, 4, NAN));
    in[2] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(1, 3, NAN));
    in[3] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(NAN, 4, NAN));
    want = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.5, -1, 0));
    fails += kiln_optest("MaxGrad", "index=1", 4, in, 1, &want, 0, 0, "maxgrad f64 NaN");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("MaxGrad", "index=1", 3, in, 1, KILN_ERR_INVALID_ARGUMENT, "maxgrad index out of range");
    return fails;
}

/* UINT64 values above INT64_MAX must compare as unsigned. Raw bits: doubles cannot hold
 * them. */
static int test_u64(void) {
    kiln_tensor *in[2] = {kt_make(KILN_U64, 1, KT_DIMS(2), NULL),
                          kt_make(KILN_U64, 1, KT_DIMS(2), NULL)};
    kiln_tensor *want = kt_make(KILN_U64, 1, KT_DIMS(2), NULL);
    if (in[0] && in[1] && want) {
        const uint64_t a[2] = {UINT64_MAX, 5}, b[2] = {7, (uint64_t)1 << 63};
        const uint64_t w[2] = {UINT64_MAX, (uint64_t)1 << 63};
        memcpy(in[0]->data, a, sizeof a);
        memcpy(in[1]->data, b, sizeof b);
        memcpy(want->data, w, sizeof w);
    }
    return kiln_optest("Max", "", 2, in, 1, &want, 0, 0, "max u64 above INT64_MAX");
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *want;
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, -1, 3, 4));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2, 0));
    in[2] = kt_scalar(KILN_F32, 2.5);
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(2.5, 2.5, 3, 4));
    fails += kiln_optest("Max", "", 3, in, 1, &want, 0, 0, "max f32 (2,2),(2),()");

    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(3, 2, 1));
    want = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(3, 2, 1));
    fails += kiln_optest("Max", "", 1, in, 1, &want, 0, 0, "max one input");

    in[0] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.5, -1e300, 7));
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.25, -1e301, 7.5));
    want = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.5, -1e300, 7.5));
    fails += kiln_optest("Max", "", 2, in, 1, &want, 0, 0, "max f64");

    in[0] = kt_make(KILN_I8, 2, KT_DIMS(2, 1), KT_VALS(-128, 5));
    in[1] = kt_make(KILN_I8, 1, KT_DIMS(3), KT_VALS(127, -3, 6));
    want = kt_make(KILN_I8, 2, KT_DIMS(2, 3), KT_VALS(127, -3, 6, 127, 5, 6));
    fails += kiln_optest("Max", "", 2, in, 1, &want, 0, 0, "max i8 (2,1),(3)");

    in[0] = kt_make(KILN_U16, 1, KT_DIMS(3), KT_VALS(65535, 0, 9));
    in[1] = kt_make(KILN_U16, 1, KT_DIMS(3), KT_VALS(65534, 1, 9));
    in[2] = kt_make(KILN_U16, 1, KT_DIMS(3), KT_VALS(3, 2, 10));
    want = kt_make(KILN_U16, 1, KT_DIMS(3), KT_VALS(65535, 2, 10));
    fails += kiln_optest("Max", "", 3, in, 1, &want, 0, 0, "max u16 three inputs");
    fails += test_u64();

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(3, 1), NULL);
    fails += kiln_optest_fails("Max", "", 2, in, 1, KILN_ERR_SHAPE, "max (2,3),(3,1) rejected");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Max", "", 2, in, 1, KILN_ERR_TYPE, "max f32,bool rejected");

    /* random inputs: no ties */
    fails += kiln_gradcheck("Max", "", 0, 3, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1),
                            kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 2), kt_rand(KILN_F64, 2, KT_DIMS(2, 1), -1, 1, 3)},
                            NULL, "max grad (2,3),(3),(2,1)");
    fails += kiln_gradcheck("Max", "", 0, 2, (kiln_tensor *[]){kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 4),
                            kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 5)}, NULL, "max grad (3,4),(3,4)");
    fails += kiln_gradcheck("Max", "", 0, 2, (kiln_tensor *[]){kt_scalar(KILN_F64, 0.1),
                            kt_rand(KILN_F64, 2, KT_DIMS(2, 4), -1, 1, 6)}, NULL, "max grad (),(2,4)");
    fails += kiln_gradcheck("Max", "", 0, 1, (kiln_tensor *[]){kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 7)},
                            NULL, "max grad one input");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Max", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 144),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 19), -2, 2, 154)},
                               1, "max random (2,3,17,19) by (3,1,19)");
    fails += kiln_optest_sweep("Max", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 9), -2, 2, 164),
                                                kt_rand(KILN_F32, 4, KT_DIMS(1, 5, 1, 1), -2, 2, 174)},
                               1, "max random (2,5,7,9) by a channel vector");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Max", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1149),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1150)},
                               1, "max same shape");
    fails += kiln_optest_sweep("Max", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(1001), -2, 2, 1151),
                                                kt_rand(KILN_F32, 1, KT_DIMS(1001), -2, 2, 1152)},
                               1, "max same shape odd");
    fails += kiln_optest_sweep("Max", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1153),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 1154)},
                               1, "max per channel");
    fails += kiln_optest_sweep("Max", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 1155),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 1156)},
                               1, "max per channel swapped");
    fails += kiln_optest_sweep("Max", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1157),
                                                kt_rand(KILN_F32, 1, KT_DIMS(5), -2, 2, 1158)},
                               1, "max row vector");
    fails += kiln_optest_sweep("Max", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1159),
                                                kt_rand(KILN_F32, 2, KT_DIMS(4, 1), -2, 2, 1160)},
                               1, "max column vector");
    fails += kiln_optest_sweep("Max", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 7), -2, 2, 1161),
                                                kt_rand(KILN_F32, 0, NULL, -2, 2, 1162)},
                               1, "max scalar");
    fails += kiln_optest_sweep("Max", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 1, 4), -2, 2, 1163),
                                                kt_rand(KILN_F32, 2, KT_DIMS(3, 1), -2, 2, 1164)},
                               1, "max general");
    fails += kiln_optest_sweep("Max", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 5, KT_DIMS(2, 1, 3, 1, 5), -2, 2, 1165),
                                                kt_rand(KILN_F32, 5, KT_DIMS(1, 4, 3, 6, 1), -2, 2, 1166)},
                               1, "max general 5-D");
    fails += kiln_optest_sweep("Max", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 4), -2, 2, 1185),
                                                kt_rand(KILN_F32, 2, KT_DIMS(3, 1), -2, 2, 1186),
                                                kt_rand(KILN_F32, 1, KT_DIMS(4), -2, 2, 1187)},
                               1, "max three inputs");
    fails += kiln_optest_sweep("Max", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 5), -2, 2, 1188)},
                               1, "max one input");
    fails += kiln_optest_sweep("Max", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 5012),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 5013),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 1), -2, 2, 5014)},
                               1, "max (NHWC) three inputs, a per-channel one");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_max_grad = {
    .precision = KILN_PREC_FP32, .layout = KILN_LAYOUT_BINARY, /* follows its forward into NHWC */
    .name = "MaxGrad", .domain = "kiln", .min_inputs = 3, .max_inputs = -1, .min_outputs = 1,
    .max_outputs = 1, .infer = kiln_select_grad_infer, .cpu_forward = kiln_select_grad_forward,
    .test = KILN_OP_TESTS(test_grad),
};

/* In kiln.FusedElementwise programs (the CUDA form computes in f32). */
static const kiln_eltwise eltwise = {
    .arity = 2,
    .cuda = "return (a > b || a != a) ? a : b;",
};

const kiln_op_def kiln_op_max = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_BINARY, .eltwise = &eltwise,
    .name = "Max", .min_inputs = 1, .max_inputs = -1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
