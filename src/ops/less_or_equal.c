/*
 * less_or_equal.c — LessOrEqual: C = (A <= B) as bool, elementwise with numpy (multidirectional) broadcasting,
 * opset 12 and 16. A and B have one dtype: any integer or float (a NaN compares false); the output is bool.
 */
#include "../core/optest.h"
#include "binary.h"

#include <math.h>

KILN_ROW_F32(less_or_equal_f32, uint8_t, a <= b)
static double less_or_equal_f64(double a, double b) { return a <= b; }
static int64_t less_or_equal_i64(int64_t a, int64_t b, bool uns) { return uns ? (uint64_t)a <= (uint64_t)b : a <= b; }
static const kiln_binary_kernels kernels = {less_or_equal_f32, less_or_equal_f64, less_or_equal_i64};

static kiln_status infer(kiln_op_ctx *c) { return kiln_binary_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT | KILN_BIN_OUT_BOOL); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_binary_forward(c, &kernels); }

#ifdef KILN_OPTESTS
static int check(const char *label, kiln_tensor *a, kiln_tensor *b, kiln_tensor *want) {
    kiln_tensor *in[2] = {a, b};
    return kiln_optest("LessOrEqual", "", 2, in, 1, &want, 0, 0, label);
}

static int test(void) {
    int fails = 0;
    fails += check("less_or_equal f32 with NaN", kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(1, 2, 3, NAN, -1, 0.5)),
                   kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(1, 1, 4, 1, NAN, 0.5)),
                   kt_make(KILN_BOOL, 1, KT_DIMS(6), KT_VALS(1, 0, 1, 0, 0, 1)));
    fails += check("less_or_equal i32 (2,3) and ()", kt_make(KILN_I32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6)),
                   kt_scalar(KILN_I32, 3), kt_make(KILN_BOOL, 2, KT_DIMS(2, 3), KT_VALS(1, 1, 1, 0, 0, 0)));
    fails += check("less_or_equal u64 compares unsigned", kt_make(KILN_U64, 1, KT_DIMS(2), KT_VALS(0, 18446744073709551615.0)),
                   kt_make(KILN_U64, 1, KT_DIMS(2), KT_VALS(1, 1)), kt_make(KILN_BOOL, 1, KT_DIMS(2), KT_VALS(1, 0)));
    fails += check("less_or_equal f16 (2,1) and (1,2)", kt_make(KILN_F16, 2, KT_DIMS(2, 1), KT_VALS(0.25, 8)),
                   kt_make(KILN_F16, 2, KT_DIMS(1, 2), KT_VALS(8, 0.25)),
                   kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 1, 1, 0)));
    kiln_tensor *in[2] = {kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL), kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL)};
    fails += kiln_optest_fails("LessOrEqual", "", 2, in, 1, KILN_ERR_TYPE, "less_or_equal rejects bool");
    fails += kiln_optest_sweep("LessOrEqual", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 5401),
                                                 kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 19), -2, 2, 5402)},
                               1, "less_or_equal random f32, broadcast");
    fails += kiln_optest_sweep("LessOrEqual", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(3, 5, 7), -3, 3, 5403),
                                                 kt_rand(KILN_I64, 1, KT_DIMS(7), -3, 3, 5404)},
                               1, "less_or_equal random i64, ties");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_less_or_equal = {
    .precision = KILN_PREC_FOLLOW, .out_dtype = {KILN_DT_BOOL},
    .name = "LessOrEqual", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
