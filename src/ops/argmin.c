/*
 * argmin.c — ArgMin: int64 index of the smallest element along `axis` (default 0).
 * Opsets 11..21 (axis, keepdims default 1, select_last_index from opset 12: on ties the
 * last index instead of the first). Floats (NaN counts as the largest value, as numpy's
 * argmin does), integers and bool. The reduced dim must not be empty.
 */
#include "../core/optest.h"
#include "arg_common.h"

#include <math.h>

static kiln_status infer(kiln_op_ctx *c) { return kiln_arg_infer(c, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_arg_forward(c, false); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x, *y;

    /* the ONNX spec's examples */
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(2, 1, 3, 10));
    y = kt_make(KILN_I64, 2, KT_DIMS(1, 2), KT_VALS(0, 0));
    fails += kiln_optest("ArgMin", "", 1, &x, 1, &y, 0, 0, "argmin default axis");
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(2, 1, 3, 10));
    y = kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(1, 0));
    fails += kiln_optest("ArgMin", "axis=1", 1, &x, 1, &y, 0, 0, "argmin axis 1");
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(2, 2, 1, 1, 3, 1));
    y = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 0));
    fails += kiln_optest("ArgMin", "axis=1;keepdims=0", 1, &x, 1, &y, 0, 0, "argmin first tie");
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(2, 2, 1, 1, 3, 1));
    y = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 2));
    fails += kiln_optest("ArgMin", "axis=-1;keepdims=0;select_last_index=1", 1, &x, 1, &y, 0, 0,
                         "argmin select_last_index");

    /* middle axis of (2,3,2) */
    x = kt_make(KILN_I32, 3, KT_DIMS(2, 3, 2), KT_VALS(0, 5, 4, 1, 2, 1, -1, -9, -3, -8, -2, -7));
    y = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(0, 1, 1, 0));
    fails += kiln_optest("ArgMin", "axis=1;keepdims=0", 1, &x, 1, &y, 0, 0, "argmin middle i32");
    x = kt_make(KILN_U64, 1, KT_DIMS(3), KT_VALS(18446744073709549568.0, 5, 7));
    y = kt_scalar(KILN_I64, 1);
    fails += kiln_optest("ArgMin", "keepdims=0", 1, &x, 1, &y, 0, 0, "argmin u64 compares unsigned");
    x = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(-1, NAN, -5));
    y = kt_scalar(KILN_I64, 1);
    fails += kiln_optest("ArgMin", "keepdims=0", 1, &x, 1, &y, 0, 0, "argmin NaN wins");
    x = kt_make(KILN_F16, 2, KT_DIMS(2, 2), KT_VALS(0.5, -0.25, 3, 3));
    y = kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(1, 1));
    fails += kiln_optest("ArgMin", "axis=1;select_last_index=1", 1, &x, 1, &y, 0, 0, "argmin f16 last");

    x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("ArgMin", "axis=-3", 1, &x, 1, KILN_ERR_SHAPE, "argmin bad axis");
    x = kt_make(KILN_F32, 2, KT_DIMS(0, 3), NULL);
    fails += kiln_optest_fails("ArgMin", "axis=0", 1, &x, 1, KILN_ERR_SHAPE, "argmin empty axis");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_argmin = {
    .precision = KILN_PREC_ANY, .out_dtype = {KILN_DT_I64},
    .name = "ArgMin", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
