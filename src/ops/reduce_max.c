/*
 * reduce_max.c — ReduceMax: maximum of the elements along `axes`.
 * Opsets 11/13: axes attribute, keepdims. Opset 18+: axes is an optional int64 input (a
 * value input) and noop_with_empty_axes applies. Floats (NaN propagates, as in numpy),
 * all integer dtypes and bool (False < True, opset 20). An empty reduction gives -inf or
 * the dtype's minimum. See reduce_common.h.
 * Gradient: kiln.ReduceMaxGrad(X, dY, Y, axes): dY goes to the elements equal to the max, split among ties.
 */
#include "../core/optest.h"
#include "reduce_common.h"

enum { AXES_INPUT_OPSET = 18 };

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_reduce_infer(c, AXES_INPUT_OPSET, true, true);
}
static kiln_status forward(kiln_op_ctx *c) {
    return kiln_reduce_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_MAX);
}
static kiln_status grad(kiln_grad_ctx *g) {
    return kiln_reduce_grad_rule(g, "ReduceMaxGrad", KILN_REDUCE_MAX);
}
static kiln_status infer_grad(kiln_op_ctx *c) {
    return kiln_reduce_grad_infer(c, AXES_INPUT_OPSET, KILN_REDUCE_MAX);
}
static kiln_status forward_grad(kiln_op_ctx *c) {
    return kiln_reduce_grad_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_MAX);
}

#ifdef KILN_OPTESTS
/* 0, 1, 2, ... in shape dims: expected values below follow from the index by hand. */
static kiln_tensor *arange(kiln_dtype dt, int ndim, const int64_t *dims) {
    kiln_tensor *t = kt_make(dt, ndim, dims, NULL);
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) kiln_set_f64(t, i, (double)i);
    return t;
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y;

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 5, 3, -2, -1, -7));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(5, -1));
    fails += kiln_optest("ReduceMax", "", 2, in, 1, &y, 0, 0, "max axis 1");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 5, 3, -2, -1, -7));
    y = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 5, 3));
    fails += kiln_optest_opset("ReduceMax", "axes=[0];keepdims=0", 13, 1, in, 1, &y, 0, 0,
                               "max opset 13 axes attribute");

    /* (2,3,4) over axes {0,2}: the largest index 12 + 4j + 3 */
    in[0] = arange(KILN_F16, 3, KT_DIMS(2, 3, 4));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 2));
    y = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(15, 19, 23));
    fails += kiln_optest("ReduceMax", "keepdims=0", 2, in, 1, &y, 0, 0, "max axes 0,2 f16");

    in[0] = kt_make(KILN_I8, 2, KT_DIMS(2, 2), KT_VALS(-128, -5, 7, 127));
    y = kt_scalar(KILN_I8, 127);
    fails += kiln_optest("ReduceMax", "keepdims=0", 1, in, 1, &y, 0, 0, "max all i8");

    in[0] = kt_make(KILN_U64, 1, KT_DIMS(3), KT_VALS(3, 9007199254740992.0, 5));
    y = kt_make(KILN_U64, 1, KT_DIMS(1), KT_VALS(9007199254740992.0));
    fails += kiln_optest("ReduceMax", "", 1, in, 1, &y, 0, 0, "max u64");

    in[0] = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(0, 0, 0, 1));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_BOOL, 2, KT_DIMS(2, 1), KT_VALS(0, 1));
    fails += kiln_optest("ReduceMax", "", 2, in, 1, &y, 0, 0, "max bool (any)");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(5));
    fails += kiln_optest_fails("ReduceMax", "", 2, in, 1, KILN_ERR_SHAPE, "max axis out of range");

    /* gradients on tie-free random inputs: axes input (18), attribute (13), all axes */
    fails += kiln_reduce_gradcheck("ReduceMax", "", 18, 1, KT_DIMS(1), 21, "max grad axis 1");
    fails += kiln_reduce_gradcheck("ReduceMax", "axes=[0,2];keepdims=0", 13, -1, NULL, 22,
                                   "max grad opset 13 axes 0,2");
    fails += kiln_reduce_gradcheck("ReduceMax", "keepdims=0", 18, -1, NULL, 23,
                                   "max grad all axes");
    fails += kiln_reduce_gradcheck("ReduceMax", "axes=[-2]", 11, -1, NULL, 24,
                                   "max grad opset 11 axis -2");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("ReduceMax", "keepdims=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 293),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "reducemax random axes 1,3 of 2x3x17x19");
    fails += kiln_optest_sweep("ReduceMax", "keepdims=0", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(1031), -2, 2, 297)},
                               1, "reducemax random all of 1031");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("ReduceMax", "", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 7), -2, 2, 1517),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                               1, "reducemax middle axis input");
    fails += kiln_optest_sweep("ReduceMax", "keepdims=0", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 7), -2, 2, 1518),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, -1))},
                               1, "reducemax outer and inner axes");
    fails += kiln_optest_sweep("ReduceMax", "", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 6, 33), -2, 2, 1519),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-1))},
                               1, "reducemax last axis");
    fails += kiln_optest_sweep("ReduceMax", "", 18, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 6, 9), -2, 2, 1520)},
                               1, "reducemax all axes");
    fails += kiln_optest_sweep("ReduceMax", "noop_with_empty_axes=1", 18, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 6), -2, 2, 1521)},
                               1, "reducemax noop");
    fails += kiln_optest_sweep("ReduceMax", "axes=[2,3]", 16, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 6), -2, 2, 1522)},
                               1, "reducemax axes attribute, NCHW spatial");
    fails += kiln_optest_sweep_tol("ReduceMax", "keepdims=0", 18, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 3000), -2, 2, 1523),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                                   1, 0.0001, 0, "reducemax long rows");
    fails += kiln_optest_sweep_tol("ReduceMax", "", 18, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(2000, 5), -2, 2, 1524),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0))},
                                   1, 0.002, 0, "reducemax long columns");
    fails += kiln_optest_sweep("ReduceMax", "", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 0, 4), -2, 2, 1525),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                               1, "reducemax an empty axis");
    /* random, for the backend sweep (tests/gpu/test_backend_ops.c): their gradient graphs
     * sweep kiln.ReduceMaxGrad (axes as an input and as the attribute, keepdims both ways) */
    fails += kiln_optest_sweep("ReduceMax", "keepdims=1", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 4, 5, 6), -2, 2, 7321),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "reducemax random axes 1,3 input");
    fails += kiln_optest_sweep("ReduceMax", "axes=[-1];keepdims=0", 13, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 7, 9), -2, 2, 7322)}, 1,
                               "reducemax random last axis attribute");
    return fails;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[4], *dx;
    /* a tie shares dY evenly */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 3, 3, 2, 0, -1));
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(1, 5));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(3, 2));
    in[3] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    dx = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 0.5, 0.5, 5, 0, 0));
    fails += kiln_optest("ReduceMaxGrad", "", 4, in, 1, &dx, 0, 0, "max grad axis 1 with a tie");
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(4, -1, 4, 2));
    in[1] = kt_scalar(KILN_F64, 3);
    in[2] = kt_scalar(KILN_F64, 4);
    in[3] = NULL;
    dx = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(1.5, 0, 1.5, 0));
    fails += kiln_optest("ReduceMaxGrad", "keepdims=0", 4, in, 1, &dx, 0, 0, "max grad all f64");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_reduce_max = {
    .precision = KILN_PREC_LOW,
    .name = "ReduceMax", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
    .grad = grad,
};

const kiln_op_def kiln_op_reduce_max_grad = {
    .precision = KILN_PREC_FP32,
    .name = "ReduceMaxGrad", .domain = "kiln", .min_inputs = 3, .max_inputs = 4,
    .min_outputs = 1, .max_outputs = 1, .value_inputs = 1u << 3,
    .infer = infer_grad, .cpu_forward = forward_grad,
    .cpu_workspace = kiln_reduce_grad_workspace, .test = KILN_OP_TESTS(test_grad),
};
