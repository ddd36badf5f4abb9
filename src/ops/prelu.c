/*
 * prelu.c — PRelu: Y = X < 0 ? slope * X : X, opsets 9..16. slope broadcasts to X's
 * shape unidirectionally (numpy rules, but the output is always X's shape: a slope of
 * (C,1,1) for X (N,C,H,W) gives per-channel slopes). X and slope have one dtype: a
 * float, or (opset 16) an integer; unsigned X is never negative, so Y = X.
 */
#include "../core/optest.h"
#include "binary.h"

KILN_ROW_F32(prelu_f32, float, a < 0 ? a * b : a)
static double prelu_f64(double a, double b) { return a < 0 ? a * b : a; }
static int64_t prelu_i64(int64_t a, int64_t b, bool uns) {
    if (uns || a >= 0) return a;
    return (int64_t)((uint64_t)a * (uint64_t)b); /* wraps like Mul */
}
static const kiln_binary_kernels kernels = {prelu_f32, prelu_f64, prelu_i64};

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_binary_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT | KILN_BIN_UNIDIR);
}
static kiln_status forward(kiln_op_ctx *c) { return kiln_binary_forward(c, &kernels); }

static int check(const char *label, kiln_tensor *x, kiln_tensor *slope, kiln_tensor *want) {
    kiln_tensor *in[2] = {x, slope};
    return kiln_optest("PRelu", "", 2, in, 1, &want, 0, 0, label);
}

static int test(void) {
    int fails = 0;
    fails += check("prelu f32 (2,3) slope (3)",
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-1, 2, -3, 4, -5, 6)),
                   kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0.5, 0.25, -2)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(-0.5, 2, 6, 4, -1.25, 6)));
    fails += check("prelu f32 (1,2,2,2) slope (2,1,1)",
                   kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(-1, 2, -3, 4, -5, 6, -7, 8)),
                   kt_make(KILN_F32, 3, KT_DIMS(2, 1, 1), KT_VALS(0.5, -1)),
                   kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2),
                           KT_VALS(-0.5, 2, -1.5, 4, 5, 6, 7, 8)));
    fails += check("prelu f32 (2,2) slope (1)",
                   kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-4, 4, 0, -0.5)),
                   kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(0.25)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(-1, 4, 0, -0.125)));
    fails += check("prelu f64 slope ()", kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(-3, 3)),
                   kt_scalar(KILN_F64, 0.1), kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(-3 * 0.1, 3)));
    fails += check("prelu i32 (3) slope (1)", kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(-3, 5, -1)),
                   kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(2)),
                   kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(-6, 5, -2)));
    fails += check("prelu u32 unchanged", kt_make(KILN_U32, 1, KT_DIMS(2), KT_VALS(4000000000.0, 1)),
                   kt_make(KILN_U32, 1, KT_DIMS(2), KT_VALS(2, 3)),
                   kt_make(KILN_U32, 1, KT_DIMS(2), KT_VALS(4000000000.0, 1)));

    /* slope (2,3) broadcasts with X (3) to (2,3), but not to X's shape */
    kiln_tensor *in[2] = {kt_make(KILN_F32, 1, KT_DIMS(3), NULL),
                          kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL)};
    fails += kiln_optest_fails("PRelu", "", 2, in, 1, KILN_ERR_SHAPE,
                               "prelu X (3) slope (2,3) rejected");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("PRelu", "", 2, in, 1, KILN_ERR_SHAPE,
                               "prelu X (2,3) slope (2) rejected");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F16, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("PRelu", "", 2, in, 1, KILN_ERR_TYPE, "prelu f32/f16 rejected");
    return fails;
}

const kiln_op_def kiln_op_prelu = {
    .name = "PRelu", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = test,
};
