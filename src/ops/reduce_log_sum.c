/*
 * reduce_log_sum.c — ReduceLogSum: the log of the sum of the elements along `axes`.
 * Opsets 11/13: axes attribute, keepdims. Opset 18+: axes is an optional int64 input (a
 * value input) and noop_with_empty_axes applies. Float and integer dtypes; floats
 * accumulate in double. See reduce_common.h. No gradient (inference only).
 */
#include "../core/optest.h"
#include "reduce_common.h"

#include <math.h>

enum { AXES_INPUT_OPSET = 18 };

static kiln_status infer(kiln_op_ctx *c) { return kiln_reduce_infer(c, AXES_INPUT_OPSET, true, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_reduce_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_LOG_SUM); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* the ONNX spec's example data, 1..12 in (3,2,2); expected values from Python */
    static const double ex[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    kiln_tensor *in[2], *y;
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(3, 2, 2), ex);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 3, KT_DIMS(3, 1, 2), KT_VALS(1.3862943611198906, 1.791759469228055, 2.4849066497880004, 2.6390573296152584, 2.9957322735539909, 3.0910424533583161));
    fails += kiln_optest("ReduceLogSum", "", 2, in, 1, &y, 1e-6, 1e-6, "reduce_log_sum axis 1 keepdims");
    in[0] = kt_make(KILN_F64, 3, KT_DIMS(3, 2, 2), ex);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-1));
    y = kt_make(KILN_F64, 2, KT_DIMS(3, 2), KT_VALS(1.0986122886681098, 1.9459101490553132, 2.3978952727983707, 2.7080502011022101, 2.9444389791664403, 3.1354942159291497));
    fails += kiln_optest("ReduceLogSum", "keepdims=0", 2, in, 1, &y, 0, 1e-14, "reduce_log_sum axis -1 f64");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(3, 2, 2), ex);
    y = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(4.3567088266895917));
    fails += kiln_optest("ReduceLogSum", "", 1, in, 1, &y, 1e-6, 1e-6, "reduce_log_sum all axes");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(3, 2, 2), ex);
    y = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(3.4965075614664802, 3.8066624897703196));
    fails += kiln_optest_opset("ReduceLogSum", "axes=[0,2];keepdims=0", 13, 1, in, 1, &y, 1e-6, 1e-6,
                               "reduce_log_sum opset 13 axes attribute");
    /* an empty reduction gives the identity */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 0), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-INFINITY, -INFINITY));
    fails += kiln_optest("ReduceLogSum", "keepdims=0", 2, in, 1, &y, 0, 0, "reduce_log_sum empty reduction");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(2));
    fails += kiln_optest_fails("ReduceLogSum", "", 2, in, 1, KILN_ERR_SHAPE, "reduce_log_sum axis out of range");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("ReduceLogSum", "", 1, in, 1, KILN_ERR_TYPE, "reduce_log_sum rejects bool");
    fails += kiln_optest_sweep("ReduceLogSum", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), 0.1, 3, 5750),
                                                 kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "reduce_log_sum random axes 1,3");
    fails += kiln_optest_sweep("ReduceLogSum", "keepdims=0", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(5, 33, 7), 0.1, 3, 5751),
                                                 kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                               1, "reduce_log_sum random middle axis");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_reduce_log_sum = {
    .precision = KILN_PREC_FP32,
    .name = "ReduceLogSum", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
