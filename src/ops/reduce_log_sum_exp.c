/*
 * reduce_log_sum_exp.c — ReduceLogSumExp: the log of the sum of exponentials (computed as m + log(sum exp(x - m)), m the maximum, so large inputs do not overflow) of the elements along `axes`.
 * Opsets 11/13: axes attribute, keepdims. Opset 18+: axes is an optional int64 input (a
 * value input) and noop_with_empty_axes applies. Float and integer dtypes; floats
 * accumulate in double. See reduce_common.h. No gradient (inference only).
 */
#include "../core/optest.h"
#include "reduce_common.h"

#include <math.h>

enum { AXES_INPUT_OPSET = 18 };

static kiln_status infer(kiln_op_ctx *c) { return kiln_reduce_infer(c, AXES_INPUT_OPSET, true, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_reduce_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_LOG_SUM_EXP); }

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* the ONNX spec's example data, 1..12 in (3,2,2); expected values from Python */
    static const double ex[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    kiln_tensor *in[2], *y;
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(3, 2, 2), ex);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 3, KT_DIMS(3, 1, 2), KT_VALS(3.1269280110429727, 4.1269280110429722, 7.1269280110429722, 8.1269280110429722, 11.126928011042972, 12.126928011042972));
    fails += kiln_optest("ReduceLogSumExp", "", 2, in, 1, &y, 1e-6, 1e-6, "reduce_log_sum_exp axis 1 keepdims");
    in[0] = kt_make(KILN_F64, 3, KT_DIMS(3, 2, 2), ex);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-1));
    y = kt_make(KILN_F64, 2, KT_DIMS(3, 2), KT_VALS(2.313261687518223, 4.3132616875182226, 6.3132616875182226, 8.3132616875182226, 10.313261687518223, 12.313261687518223));
    fails += kiln_optest("ReduceLogSumExp", "keepdims=0", 2, in, 1, &y, 0, 1e-14, "reduce_log_sum_exp axis -1 f64");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(3, 2, 2), ex);
    y = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(12.458669001155853));
    fails += kiln_optest("ReduceLogSumExp", "", 1, in, 1, &y, 1e-6, 1e-6, "reduce_log_sum_exp all axes");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(3, 2, 2), ex);
    y = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(10.33174099011288, 12.33174099011288));
    fails += kiln_optest_opset("ReduceLogSumExp", "axes=[0,2];keepdims=0", 13, 1, in, 1, &y, 1e-6, 1e-6,
                               "reduce_log_sum_exp opset 13 axes attribute");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(-2.5, 1, 0.5, -3, 2, 4, -1, 1.5, 3, -0.5, 2, 1));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 1), KT_VALS(1.5038274024527274, 4.202253447679352, 3.4274953881792891));
    fails += kiln_optest("ReduceLogSumExp", "", 2, in, 1, &y, 1e-6, 1e-6, "reduce_log_sum_exp signed values");
    /* large values: exp would overflow without the max taken out */
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1000, 1000));
    y = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(1000.6931471805599));
    fails += kiln_optest("ReduceLogSumExp", "", 1, in, 1, &y, 1e-6, 1e-6, "reduce_log_sum_exp no overflow");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-INFINITY, -INFINITY));
    y = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(-INFINITY));
    fails += kiln_optest("ReduceLogSumExp", "", 1, in, 1, &y, 0, 0, "reduce_log_sum_exp all -inf");
    /* an empty reduction gives the identity */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 0), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-INFINITY, -INFINITY));
    fails += kiln_optest("ReduceLogSumExp", "keepdims=0", 2, in, 1, &y, 0, 0, "reduce_log_sum_exp empty reduction");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(2));
    fails += kiln_optest_fails("ReduceLogSumExp", "", 2, in, 1, KILN_ERR_SHAPE, "reduce_log_sum_exp axis out of range");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("ReduceLogSumExp", "", 1, in, 1, KILN_ERR_TYPE, "reduce_log_sum_exp rejects bool");
    fails += kiln_optest_sweep("ReduceLogSumExp", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 5760),
                                                 kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "reduce_log_sum_exp random axes 1,3");
    fails += kiln_optest_sweep("ReduceLogSumExp", "keepdims=0", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(5, 33, 7), -3, 3, 5761),
                                                 kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                               1, "reduce_log_sum_exp random middle axis");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_reduce_log_sum_exp = {
    .precision = KILN_PREC_FP32,
    .name = "ReduceLogSumExp", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
