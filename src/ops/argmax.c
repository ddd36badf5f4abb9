/*
 * argmax.c — ArgMax: int64 index of the largest element along `axis` (default 0).
 * Opsets 11..21 (axis, keepdims default 1, select_last_index from opset 12: on ties the
 * last index instead of the first). Floats (NaN counts as the largest value, as numpy's
 * argmax does), integers and bool. The reduced dim must not be empty.
 */
#include "../core/optest.h"
#include "arg_common.h"

#include <math.h>

static kiln_status infer(kiln_op_ctx *c) { return kiln_arg_infer(c, true); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_arg_forward(c, true); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x, *y;

    x = kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(2, 1, 3, 10, 3, 10));
    y = kt_make(KILN_I64, 2, KT_DIMS(1, 2), KT_VALS(1, 1));
    fails += kiln_optest("ArgMax", "", 1, &x, 1, &y, 0, 0, "argmax default axis, first tie");
    x = kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(2, 1, 3, 10, 3, 10));
    y = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 2));
    fails += kiln_optest("ArgMax", "keepdims=0;select_last_index=1", 1, &x, 1, &y, 0, 0,
                         "argmax select_last_index");

    x = kt_make(KILN_F16, 2, KT_DIMS(2, 4), KT_VALS(1, 7, 7, 3, 9, 2, 9, 9));
    y = kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(1, 0));
    fails += kiln_optest("ArgMax", "axis=-1", 1, &x, 1, &y, 0, 0, "argmax axis -1 f16");
    x = kt_make(KILN_F16, 2, KT_DIMS(2, 4), KT_VALS(1, 7, 7, 3, 9, 2, 9, 9));
    y = kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(2, 3));
    fails += kiln_optest("ArgMax", "axis=1;select_last_index=1", 1, &x, 1, &y, 0, 0,
                         "argmax axis 1 last f16");

    /* middle axis of (2,3,2) */
    x = kt_make(KILN_I32, 3, KT_DIMS(2, 3, 2), KT_VALS(0, 5, 4, 1, 2, 1, -1, -9, -3, -8, -2, -7));
    y = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(1, 0, 0, 2));
    fails += kiln_optest("ArgMax", "axis=1;keepdims=0", 1, &x, 1, &y, 0, 0, "argmax middle i32");

    x = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-1, NAN, 5));
    y = kt_scalar(KILN_I64, 1);
    fails += kiln_optest("ArgMax", "keepdims=0", 1, &x, 1, &y, 0, 0, "argmax NaN wins");

    x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("ArgMax", "axis=2", 1, &x, 1, KILN_ERR_SHAPE, "argmax bad axis");
    x = kt_make(KILN_F32, 2, KT_DIMS(0, 3), NULL);
    fails += kiln_optest_fails("ArgMax", "axis=0", 1, &x, 1, KILN_ERR_SHAPE, "argmax empty axis");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_argmax = {
    .precision = KILN_PREC_ANY, .out_dtype = {KILN_DT_I64},
    .name = "ArgMax", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
