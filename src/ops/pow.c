/*
 * pow.c — Pow: Z = X ^ Y with numpy (multidirectional) broadcasting, opsets 7..15.
 * X (base) and Y (exponent) may have different dtypes (opset 12+; accepted at every
 * opset): floats or integers each. Z has X's dtype.
 *   - A float on either side: computed as pow() in double, then rounded to a float Z, or
 *     for an integer Z truncated toward zero (saturated; NaN gives 0): int 2 ^ 0.5 = 1.
 *   - Both integers: exact repeated squaring, wrapping modulo 2^bits like Mul. A negative
 *     exponent (numpy raises) is defined as the truncated real result: 1 for base 1,
 *     ±1 for base -1, 0 otherwise (including base 0).
 */
#include "../core/optest.h"
#include "binary.h"

#include <math.h>
#include <string.h>

KILN_ROW_F32(pow_f32, float, (float)pow(a, b))
static double pow_f64(double a, double b) { return pow(a, b); }
static int64_t pow_i64(int64_t a, int64_t b, bool uns) {
    if (b < 0) {
        if (a == 1) return 1;
        if (a == -1 && !uns) return (b & 1) ? -1 : 1;
        return 0;
    }
    uint64_t r = 1, x = (uint64_t)a, e = (uint64_t)b; /* unsigned: wraps without UB */
    while (e) {
        if (e & 1) r *= x;
        x *= x;
        e >>= 1;
    }
    return (int64_t)r;
}
static const kiln_binary_kernels kernels = {pow_f32, pow_f64, pow_i64};

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_binary_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT | KILN_BIN_MIXED);
}
static kiln_status forward(kiln_op_ctx *c) { return kiln_binary_forward(c, &kernels); }

static int check(const char *label, kiln_tensor *a, kiln_tensor *b, kiln_tensor *want,
                 double rtol) {
    kiln_tensor *in[2] = {a, b};
    return kiln_optest("Pow", "", 2, in, 1, &want, 0, rtol, label);
}

/* 3^39 = 4052555153018976267 is above 2^53: only exact integer powers get it right. */
static int test_i64_exact(void) {
    kiln_tensor *w = kt_make(KILN_I64, 1, KT_DIMS(2), NULL);
    if (w) {
        const int64_t wv[2] = {INT64_C(4052555153018976267), INT64_C(-4052555153018976267)};
        memcpy(w->data, wv, sizeof wv);
    }
    return check("pow i64 3^39 exact", kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, -3)),
                 kt_scalar(KILN_I64, 39), w, 0);
}

static int test(void) {
    int fails = 0;
    fails += check("pow f32 (2,3)^(3)",
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 9, -2)),
                   kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2, 0.5, -1)),
                   kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 1.4142135623730951,
                                                               1.0 / 3, 16, 3, -0.5)),
                   1e-6);
    fails += check("pow f32 (3)^()", kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 3)),
                   kt_scalar(KILN_F32, 2), kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 4, 9)),
                   0);
    fails += check("pow f32 ^ i32", kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 3)),
                   kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(4, 5, -2)),
                   kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 32, 1.0 / 9)), 1e-6);
    fails += check("pow f16 ^ u64", kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(1.5, -2)),
                   kt_make(KILN_U64, 1, KT_DIMS(2), KT_VALS(2, 3)),
                   kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(2.25, -8)), 0);
    fails += check("pow i32 ^ f32 truncates",
                   kt_make(KILN_I32, 1, KT_DIMS(4), KT_VALS(1, 2, 3, 2)),
                   kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(4, 5, 6, 0.5)),
                   kt_make(KILN_I32, 1, KT_DIMS(4), KT_VALS(1, 32, 729, 1)), 0);
    fails += check("pow i32 (2,1)^(3) negative exponents",
                   kt_make(KILN_I32, 2, KT_DIMS(2, 1), KT_VALS(-1, 2)),
                   kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(-3, -2, 0)),
                   kt_make(KILN_I32, 2, KT_DIMS(2, 3), KT_VALS(-1, 1, 1, 0, 0, 1)), 0);
    /* 2^40 wraps to 0 in i32; 3^21 = 10460353203 = 2 * 2^32 + 1870418611 */
    fails += check("pow i32 wraps", kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(2, 3)),
                   kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(40, 21)),
                   kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 1870418611)), 0);
    fails += test_i64_exact();

    kiln_tensor *in[2] = {kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL),
                          kt_make(KILN_I64, 1, KT_DIMS(2), NULL)};
    fails += kiln_optest_fails("Pow", "", 2, in, 1, KILN_ERR_SHAPE, "pow (2,3)^(2) rejected");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Pow", "", 2, in, 1, KILN_ERR_TYPE, "pow bool base rejected");
    return fails;
}

const kiln_op_def kiln_op_pow = {
    .name = "Pow", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = test,
};
