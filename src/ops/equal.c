/*
 * equal.c — Equal: C = (A == B) as bool, with numpy (multidirectional) broadcasting,
 * opsets 7..19. A and B have one dtype: bool, any integer or any float (NaN equals
 * nothing, not even NaN).
 */
#include "../core/optest.h"
#include "binary.h"

#include <math.h>

KILN_ROW_F32(eq_f32, uint8_t, a == b)
static double eq_f64(double a, double b) { return a == b; }
static int64_t eq_i64(int64_t a, int64_t b, bool uns) { return a == b; }
static const kiln_binary_kernels kernels = {eq_f32, eq_f64, eq_i64};

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_binary_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT | KILN_BIN_BOOL |
                                    KILN_BIN_OUT_BOOL);
}
static kiln_status forward(kiln_op_ctx *c) { return kiln_binary_forward(c, &kernels); }

static int check(const char *label, kiln_tensor *a, kiln_tensor *b, kiln_tensor *want) {
    kiln_tensor *in[2] = {a, b};
    return kiln_optest("Equal", "", 2, in, 1, &want, 0, 0, label);
}

static int test(void) {
    int fails = 0;
    fails += check("equal i32 (2,3),(3)",
                   kt_make(KILN_I32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 2, -3)),
                   kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(1, 2, -3)),
                   kt_make(KILN_BOOL, 2, KT_DIMS(2, 3), KT_VALS(1, 1, 0, 0, 1, 1)));
    fails += check("equal f32 with NaN and -0",
                   kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(NAN, 0.5, -0.0, 1)),
                   kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(NAN, 0.5, 0.0, 2)),
                   kt_make(KILN_BOOL, 1, KT_DIMS(4), KT_VALS(0, 1, 1, 0)));
    fails += check("equal f32 ()==(3)", kt_scalar(KILN_F32, 2),
                   kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2, 3, 2)),
                   kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 0, 1)));
    fails += check("equal f16 (2,1),(1,2)",
                   kt_make(KILN_F16, 2, KT_DIMS(2, 1), KT_VALS(0.25, 8)),
                   kt_make(KILN_F16, 2, KT_DIMS(1, 2), KT_VALS(8, 0.25)),
                   kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(0, 1, 1, 0)));
    fails += check("equal bool", kt_make(KILN_BOOL, 1, KT_DIMS(4), KT_VALS(1, 0, 1, 0)),
                   kt_make(KILN_BOOL, 1, KT_DIMS(4), KT_VALS(1, 1, 0, 0)),
                   kt_make(KILN_BOOL, 1, KT_DIMS(4), KT_VALS(1, 0, 0, 1)));
    fails += check("equal i64 (2)==()", kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-7, 7)),
                   kt_scalar(KILN_I64, -7), kt_make(KILN_BOOL, 1, KT_DIMS(2), KT_VALS(1, 0)));

    kiln_tensor *in[2] = {kt_make(KILN_I32, 2, KT_DIMS(2, 3), NULL),
                          kt_make(KILN_I32, 1, KT_DIMS(2), NULL)};
    fails += kiln_optest_fails("Equal", "", 2, in, 1, KILN_ERR_SHAPE, "equal (2,3),(2) rejected");
    in[0] = kt_make(KILN_I32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Equal", "", 2, in, 1, KILN_ERR_TYPE, "equal i32,i64 rejected");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Equal", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 361),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 19), -2, 2, 364)},
                               1, "equal random f32, broadcast");
    fails += kiln_optest_sweep("Equal", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 367),
                                                kt_rand(KILN_I64, 1, KT_DIMS(19), -3, 3, 370)},
                               1, "equal random i64, ties");
    return fails;
}

const kiln_op_def kiln_op_equal = {
    .name = "Equal", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = test,
};
