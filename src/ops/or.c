/*
 * or.c — Or: C = A or B, elementwise with numpy (multidirectional) broadcasting,
 * opset 7. A and B have one dtype: bool; the output is bool.
 */
#include "../core/optest.h"
#include "binary.h"

#include <math.h>

static int64_t or_i64(int64_t a, int64_t b, bool uns) { return a || b; }
static const kiln_binary_kernels kernels = {NULL, NULL, or_i64};

static kiln_status infer(kiln_op_ctx *c) { return kiln_binary_infer(c, KILN_BIN_BOOL | KILN_BIN_OUT_BOOL); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_binary_forward(c, &kernels); }

#ifdef KILN_OPTESTS
static int check(const char *label, kiln_tensor *a, kiln_tensor *b, kiln_tensor *want) {
    kiln_tensor *in[2] = {a, b};
    return kiln_optest("Or", "", 2, in, 1, &want, 0, 0, label);
}

static int test(void) {
    int fails = 0;
    fails += check("or truth table", kt_make(KILN_BOOL, 1, KT_DIMS(4), KT_VALS(1, 0, 1, 0)),
                   kt_make(KILN_BOOL, 1, KT_DIMS(4), KT_VALS(1, 1, 0, 0)),
                   kt_make(KILN_BOOL, 1, KT_DIMS(4), KT_VALS(1, 1, 1, 0)));
    fails += check("or (2,1) and (3) broadcast", kt_make(KILN_BOOL, 2, KT_DIMS(2, 1), KT_VALS(1, 0)),
                   kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 0, 1)),
                   kt_make(KILN_BOOL, 2, KT_DIMS(2, 3), KT_VALS(1, 1, 1, 1, 0, 1)));
    kiln_tensor *in[2] = {kt_make(KILN_I32, 1, KT_DIMS(2), NULL), kt_make(KILN_I32, 1, KT_DIMS(2), NULL)};
    fails += kiln_optest_fails("Or", "", 2, in, 1, KILN_ERR_TYPE, "or rejects i32");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("Or", "", 2, in, 1, KILN_ERR_SHAPE, "or (2),(3) rejected");
    fails += kiln_optest_sweep("Or", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_BOOL, 4, KT_DIMS(2, 3, 17, 19), 0, 2, 5411),
                                                 kt_rand(KILN_BOOL, 3, KT_DIMS(3, 1, 19), 0, 2, 5412)},
                               1, "or random, broadcast");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_or = {
    .precision = KILN_PREC_ANY, .out_dtype = {KILN_DT_BOOL},
    .name = "Or", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
