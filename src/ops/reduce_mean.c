/*
 * reduce_mean.c — ReduceMean: mean of the elements along `axes`.
 * Opsets 11/13: axes attribute, keepdims. Opset 18+: axes is an optional int64 input (a
 * value input) and noop_with_empty_axes applies. Floats are averaged in double (an
 * empty reduction gives NaN); integers are summed in 64 bits and divided with
 * truncation toward zero, as numpy's mean followed by a cast does. See reduce_common.h.
 */
#include "../core/optest.h"
#include "reduce_common.h"

enum { AXES_INPUT_OPSET = 18 };

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_reduce_infer(c, AXES_INPUT_OPSET, true, false);
}
static kiln_status forward(kiln_op_ctx *c) {
    return kiln_reduce_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_MEAN);
}

/* 0, 1, 2, ... in shape dims: expected values below follow from the index by hand. */
static kiln_tensor *arange(kiln_dtype dt, int ndim, const int64_t *dims) {
    kiln_tensor *t = kt_make(dt, ndim, dims, NULL);
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) kiln_set_f64(t, i, (double)i);
    return t;
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y;

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(2, 5));
    fails += kiln_optest("ReduceMean", "", 2, in, 1, &y, 0, 0, "mean axis 1 keepdims");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6));
    y = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2.5, 3.5, 4.5));
    fails += kiln_optest_opset("ReduceMean", "axes=[0];keepdims=0", 13, 1, in, 1, &y, 0, 0,
                               "mean opset 13 axes attribute");

    /* (2,3,4) over axes {0,2}: mean_{a,c} 12a + 4j + c = 7.5 + 4j */
    in[0] = arange(KILN_F32, 3, KT_DIMS(2, 3, 4));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-3, 2));
    y = kt_make(KILN_F32, 3, KT_DIMS(1, 3, 1), KT_VALS(7.5, 11.5, 15.5));
    fails += kiln_optest("ReduceMean", "", 2, in, 1, &y, 1e-6, 1e-6, "mean axes 0,2 f32");

    /* NCHW spatial mean, the global-average-pool pattern: (1,2,2,2) over {2,3} */
    in[0] = kt_make(KILN_BF16, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(1, 2, 3, 6, -1, -2, -3, -4));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 3));
    y = kt_make(KILN_BF16, 4, KT_DIMS(1, 2, 1, 1), KT_VALS(3, -2.5));
    fails += kiln_optest("ReduceMean", "", 2, in, 1, &y, 0, 0, "mean spatial bf16");

    in[0] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(0.1, 0.2, 0.4));
    y = kt_scalar(KILN_F64, 0.7 / 3);
    fails += kiln_optest("ReduceMean", "keepdims=0", 1, in, 1, &y, 1e-15, 1e-15, "mean all f64");

    in[0] = kt_make(KILN_I32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 4, -1, -2, -4));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(2, -2));
    fails += kiln_optest("ReduceMean", "keepdims=0", 2, in, 1, &y, 0, 0, "mean i32 truncates");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("ReduceMean", "axes=[1]", 1, in, 1, KILN_ERR_UNSUPPORTED,
                               "mean opset 21 rejects axes attribute");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-3));
    fails += kiln_optest_fails("ReduceMean", "", 2, in, 1, KILN_ERR_SHAPE, "mean axis out of range");
    return fails;
}

const kiln_op_def kiln_op_reduce_mean = {
    .name = "ReduceMean", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = test,
};
