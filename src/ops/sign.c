/* sign.c — Sign: y = 1 for x > 0, -1 for x < 0, 0 for 0 (NaN stays NaN, as numpy's sign).
 * Float and all integer dtypes; opsets 9 and 13. Integers are exact (unsigned values are
 * 0 or 1). No gradient (0 almost everywhere). */
#include "../core/optest.h"
#include "unary.h"

#include <math.h>

static double sign_fn(double x, const kiln_unary_args *a) { return x > 0 ? 1 : x < 0 ? -1 : x; }
static int64_t sign_int(int64_t x) { return x > 0 ? 1 : x < 0 ? -1 : 0; }
static int64_t sign_uint(int64_t x) { return x != 0; }

static kiln_status infer(kiln_op_ctx *c) { return kiln_unary_infer(c, true); }
static kiln_status forward(kiln_op_ctx *c) {
    bool is_signed = kiln_dtype_is_signed(c->in[0]->dtype);
    return kiln_unary_forward_args(c, sign_fn, is_signed ? sign_int : sign_uint, NULL);
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(-5, -0.0, 0, 1e-30, 7, NAN));
    kiln_tensor *y = kt_make(KILN_F32, 1, KT_DIMS(6), KT_VALS(-1, 0, 0, 1, 1, NAN));
    fails += kiln_optest("Sign", "", 1, &x, 1, &y, 0, 0, "sign f32");
    x = kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(-9007199254740993.0, 0, 3, -1));
    y = kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(-1, 0, 1, -1));
    fails += kiln_optest("Sign", "", 1, &x, 1, &y, 0, 0, "sign i64");
    x = kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(0, 200, 1));
    y = kt_make(KILN_U8, 1, KT_DIMS(3), KT_VALS(0, 1, 1));
    fails += kiln_optest("Sign", "", 1, &x, 1, &y, 0, 0, "sign u8");
    x = kt_make(KILN_BF16, 1, KT_DIMS(2), KT_VALS(-0.5, 2));
    y = kt_make(KILN_BF16, 1, KT_DIMS(2), KT_VALS(-1, 1));
    fails += kiln_optest("Sign", "", 1, &x, 1, &y, 0, 0, "sign bf16");
    x = kt_make(KILN_BOOL, 1, KT_DIMS(2), KT_VALS(0, 1));
    fails += kiln_optest_fails("Sign", "", 1, &x, 1, KILN_ERR_TYPE, "sign rejects bool");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Sign", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 5311)},
                               1, "sign random 2x3x17x19");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_sign = {
    .precision = KILN_PREC_LOW, .layout = KILN_LAYOUT_UNARY,
    .name = "Sign", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
