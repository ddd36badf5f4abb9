/*
 * reduce_prod.c — ReduceProd: the product of the elements along `axes`.
 * Opsets 11/13: axes attribute, keepdims. Opset 18+: axes is an optional int64 input (a
 * value input) and noop_with_empty_axes applies. Float and integer dtypes; floats
 * accumulate in double. See reduce_common.h. No gradient (inference only).
 */
#include "../core/optest.h"
#include "reduce_common.h"

#include <math.h>

enum { AXES_INPUT_OPSET = 18 };

static kiln_status infer(kiln_op_ctx *c) { return kiln_reduce_infer(c, AXES_INPUT_OPSET, true, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_reduce_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_PROD); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* the ONNX spec's example data, 1..12 in (3,2,2); expected values from Python */
    static const double ex[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    kiln_tensor *in[2], *y;
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(3, 2, 2), ex);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 3, KT_DIMS(3, 1, 2), KT_VALS(3, 8, 35, 48, 99, 120));
    fails += kiln_optest("ReduceProd", "", 2, in, 1, &y, 1e-6, 1e-6, "reduce_prod axis 1 keepdims");
    in[0] = kt_make(KILN_F64, 3, KT_DIMS(3, 2, 2), ex);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-1));
    y = kt_make(KILN_F64, 2, KT_DIMS(3, 2), KT_VALS(2, 12, 30, 56, 90, 132));
    fails += kiln_optest("ReduceProd", "keepdims=0", 2, in, 1, &y, 0, 1e-14, "reduce_prod axis -1 f64");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(3, 2, 2), ex);
    y = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(479001600));
    fails += kiln_optest("ReduceProd", "", 1, in, 1, &y, 1e-6, 1e-6, "reduce_prod all axes");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(3, 2, 2), ex);
    y = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(5400, 88704));
    fails += kiln_optest_opset("ReduceProd", "axes=[0,2];keepdims=0", 13, 1, in, 1, &y, 1e-6, 1e-6,
                               "reduce_prod opset 13 axes attribute");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(-2.5, 1, 0.5, -3, 2, 4, -1, 1.5, 3, -0.5, 2, 1));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 1), KT_VALS(3.75, -12, -3));
    fails += kiln_optest("ReduceProd", "", 2, in, 1, &y, 1e-6, 1e-6, "reduce_prod signed values");
    in[0] = kt_make(KILN_I64, 3, KT_DIMS(3, 2, 2), ex);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0));
    y = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(45, 120, 231, 384));
    fails += kiln_optest("ReduceProd", "keepdims=0", 2, in, 1, &y, 0, 0, "reduce_prod i64 exact");
    /* an empty reduction gives the identity */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 0), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, 1));
    fails += kiln_optest("ReduceProd", "keepdims=0", 2, in, 1, &y, 0, 0, "reduce_prod empty reduction");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(2));
    fails += kiln_optest_fails("ReduceProd", "", 2, in, 1, KILN_ERR_SHAPE, "reduce_prod axis out of range");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("ReduceProd", "", 1, in, 1, KILN_ERR_TYPE, "reduce_prod rejects bool");
    fails += kiln_optest_sweep("ReduceProd", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), 0.5, 1.5, 5740),
                                                 kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "reduce_prod random axes 1,3");
    fails += kiln_optest_sweep("ReduceProd", "keepdims=0", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(5, 33, 7), 0.5, 1.5, 5741),
                                                 kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                               1, "reduce_prod random middle axis");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_reduce_prod = {
    .precision = KILN_PREC_FP32,
    .name = "ReduceProd", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
