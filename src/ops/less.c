/*
 * less.c — Less: C = (A < B) as bool, with numpy (multidirectional) broadcasting,
 * opsets 7..13. A and B have one dtype: any integer or float (a NaN compares false).
 */
#include "../core/optest.h"
#include "binary.h"

#include <math.h>
#include <string.h>

KILN_ROW_F32(less_f32, uint8_t, a < b)
static double less_f64(double a, double b) { return a < b; }
static int64_t less_i64(int64_t a, int64_t b, bool uns) {
    return uns ? (uint64_t)a < (uint64_t)b : a < b;
}
static const kiln_binary_kernels kernels = {less_f32, less_f64, less_i64};

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_binary_infer(c, KILN_BIN_FLOAT | KILN_BIN_INT | KILN_BIN_OUT_BOOL);
}
static kiln_status forward(kiln_op_ctx *c) { return kiln_binary_forward(c, &kernels); }

#ifdef KILN_OPTESTS
static int check(const char *label, kiln_tensor *a, kiln_tensor *b, kiln_tensor *want) {
    kiln_tensor *in[2] = {a, b};
    return kiln_optest("Less", "", 2, in, 1, &want, 0, 0, label);
}

/* UINT64 values above INT64_MAX must compare as unsigned (raw bits: doubles cannot hold
 * them). */
static int test_u64(void) {
    kiln_tensor *a = kt_make(KILN_U64, 1, KT_DIMS(2), NULL);
    kiln_tensor *b = kt_make(KILN_U64, 1, KT_DIMS(2), NULL);
    if (a && b) {
        const uint64_t av[2] = {(uint64_t)1 << 63, 1}, bv[2] = {1, UINT64_MAX};
        memcpy(a->data, av, sizeof av);
        memcpy(b->data, bv, sizeof bv);
    }
    return check("less u64 above INT64_MAX", a, b,
                 kt_make(KILN_BOOL, 1, KT_DIMS(2), KT_VALS(0, 1)));
}

static int test(void) {
    int fails = 0;
    fails += check("less f32 (2,2),(2) with NaN",
                   kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 5, -1, NAN)),
                   kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2, 5)),
                   kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 0, 1, 0)));
    fails += check("less f32 ()<(3)", kt_scalar(KILN_F32, 0),
                   kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(-1, 0, 1e-30)),
                   kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(0, 0, 1)));
    fails += check("less f64 (2,1),(1,2)",
                   kt_make(KILN_F64, 2, KT_DIMS(2, 1), KT_VALS(1, 1 + 1e-15)),
                   kt_make(KILN_F64, 2, KT_DIMS(1, 2), KT_VALS(1 + 1e-15, 1)),
                   kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 0, 0, 0)));
    fails += check("less i8 (3),()", kt_make(KILN_I8, 1, KT_DIMS(3), KT_VALS(-128, 0, 127)),
                   kt_scalar(KILN_I8, 0), kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 0, 0)));
    fails += test_u64();

    kiln_tensor *in[2] = {kt_make(KILN_F32, 1, KT_DIMS(4), NULL),
                          kt_make(KILN_F32, 2, KT_DIMS(4, 3), NULL)};
    fails += kiln_optest_fails("Less", "", 2, in, 1, KILN_ERR_SHAPE, "less (4),(4,3) rejected");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Less", "", 2, in, 1, KILN_ERR_TYPE, "less bool rejected");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("Less", "", 2, in, 1, KILN_ERR_TYPE, "less f32,f64 rejected");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Less", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 362),
                                                kt_rand(KILN_F32, 3, KT_DIMS(3, 1, 19), -2, 2, 365)},
                               1, "less random f32, broadcast");
    fails += kiln_optest_sweep("Less", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 368),
                                                kt_rand(KILN_I64, 1, KT_DIMS(19), -3, 3, 371)},
                               1, "less random i64, ties");
    /* ties, NaN and -0 in every dtype, for the backend sweep (its f32 cases run in f16 and
     * bf16 too; integer types read NaN as 5) */
    {
        static const double a[24] = {0, 1, 2, -1, NAN, 1, 2, 2, 0, -0.0, 3, -2, 1, 1, NAN, 0, -1, 2, 3, 3, -2, 0, 1, 2};
        static const double ai[24] = {0, 1, 2, -1, 5, 1, 2, 2, 0, 0, 3, -2, 1, 1, 5, 0, -1, 2, 3, 3, -2, 0, 1, 2};
        static const double b[4] = {1, NAN, 0, 2}, bi[4] = {1, 5, 0, 2}, c[3] = {-0.0, 2, 1};
        static const kiln_dtype types[] = {KILN_F32, KILN_F64, KILN_I64, KILN_I32, KILN_I8, KILN_U8, KILN_U64};
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            const kiln_dtype t = types[k];
            const bool fl = kiln_dtype_is_float(t);
            fails += kiln_optest_sweep("Less", "", 0, 2,
                                       (kiln_tensor *[]){kt_make(t, 3, KT_DIMS(2, 3, 4), fl ? a : ai),
                                                         kt_make(t, 1, KT_DIMS(4), fl ? b : bi)},
                                       1, "less specials, (2,3,4) and (4)");
            fails += kiln_optest_sweep("Less", "", 0, 2,
                                       (kiln_tensor *[]){kt_make(t, 2, KT_DIMS(3, 1), c),
                                                         kt_make(t, 3, KT_DIMS(2, 3, 4), fl ? a : ai)},
                                       1, "less specials, (3,1) and (2,3,4)");
            fails += kiln_optest_sweep("Less", "", 0, 2,
                                       (kiln_tensor *[]){kt_make(t, 1, KT_DIMS(21), fl ? a : ai),
                                                         kt_make(t, 1, KT_DIMS(21), (fl ? a : ai) + 3)},
                                       1, "less specials, same shape");
        }
    }
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_less = {
    .precision = KILN_PREC_FOLLOW, .out_dtype = {KILN_DT_BOOL},
    .name = "Less", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
