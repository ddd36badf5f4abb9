/*
 * reduce_min.c — ReduceMin: minimum of the elements along `axes`.
 * Opsets 11/13: axes attribute, keepdims. Opset 18+: axes is an optional int64 input (a
 * value input) and noop_with_empty_axes applies. Floats (NaN propagates, as in numpy),
 * all integer dtypes and bool (False < True, opset 20). An empty reduction gives +inf or
 * the dtype's maximum. See reduce_common.h.
 * Gradient: kiln.ReduceMinGrad(X, dY, Y, axes): dY goes to the elements equal to the min, split among ties.
 */
#include "../core/optest.h"
#include "reduce_common.h"

enum { AXES_INPUT_OPSET = 18 };

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_reduce_infer(c, AXES_INPUT_OPSET, true, true);
}
static kiln_status forward(kiln_op_ctx *c) {
    return kiln_reduce_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_MIN);
}
static kiln_status grad(kiln_grad_ctx *g) {
    return kiln_reduce_grad_rule(g, "ReduceMinGrad", KILN_REDUCE_MIN);
}
static kiln_status infer_grad(kiln_op_ctx *c) {
    return kiln_reduce_grad_infer(c, AXES_INPUT_OPSET, KILN_REDUCE_MIN);
}
static kiln_status forward_grad(kiln_op_ctx *c) {
    return kiln_reduce_grad_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_MIN);
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
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-1));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(1, -7));
    fails += kiln_optest("ReduceMin", "", 2, in, 1, &y, 0, 0, "min axis -1");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 5, 3, -2, -1, -7));
    y = kt_make(KILN_F32, 2, KT_DIMS(1, 3), KT_VALS(-2, -1, -7));
    fails += kiln_optest_opset("ReduceMin", "axes=[0]", 11, 1, in, 1, &y, 0, 0,
                               "min opset 11 axes attribute");

    /* (2,3,4) over axes {0,2}: the smallest index 4j */
    in[0] = arange(KILN_F64, 3, KT_DIMS(2, 3, 4));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 0));
    y = kt_make(KILN_F64, 3, KT_DIMS(1, 3, 1), KT_VALS(0, 4, 8));
    fails += kiln_optest("ReduceMin", "", 2, in, 1, &y, 0, 0, "min axes 2,0 f64");

    in[0] = kt_make(KILN_U8, 2, KT_DIMS(2, 2), KT_VALS(200, 3, 255, 17));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0));
    y = kt_make(KILN_U8, 1, KT_DIMS(2), KT_VALS(200, 3));
    fails += kiln_optest("ReduceMin", "keepdims=0", 2, in, 1, &y, 0, 0, "min u8 axis 0");

    in[0] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(-4, 9, -11));
    y = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-11));
    fails += kiln_optest("ReduceMin", "", 1, in, 1, &y, 0, 0, "min all i64");

    in[0] = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 1, 0, 1));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_BOOL, 2, KT_DIMS(2, 1), KT_VALS(1, 0));
    fails += kiln_optest("ReduceMin", "", 2, in, 1, &y, 0, 0, "min bool (all)");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(1));
    fails += kiln_optest_fails("ReduceMin", "", 2, in, 1, KILN_ERR_TYPE, "min float axes");

    /* gradients on tie-free random inputs: axes input (18), attribute (13), all axes */
    fails += kiln_reduce_gradcheck("ReduceMin", "", 18, 1, KT_DIMS(1), 31, "min grad axis 1");
    fails += kiln_reduce_gradcheck("ReduceMin", "axes=[0,2];keepdims=0", 13, -1, NULL, 32,
                                   "min grad opset 13 axes 0,2");
    fails += kiln_reduce_gradcheck("ReduceMin", "keepdims=0", 18, -1, NULL, 33,
                                   "min grad all axes");
    fails += kiln_reduce_gradcheck("ReduceMin", "axes=[-2]", 11, -1, NULL, 34,
                                   "min grad opset 11 axis -2");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("ReduceMin", "keepdims=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 294),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "reducemin random axes 1,3 of 2x3x17x19");
    fails += kiln_optest_sweep("ReduceMin", "keepdims=0", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(1031), -2, 2, 298)},
                               1, "reducemin random all of 1031");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("ReduceMin", "", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 7), -2, 2, 1526),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                               1, "reducemin middle axis input");
    fails += kiln_optest_sweep("ReduceMin", "keepdims=0", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 7), -2, 2, 1527),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, -1))},
                               1, "reducemin outer and inner axes");
    fails += kiln_optest_sweep("ReduceMin", "", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 6, 33), -2, 2, 1528),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-1))},
                               1, "reducemin last axis");
    fails += kiln_optest_sweep("ReduceMin", "", 18, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 6, 9), -2, 2, 1529)},
                               1, "reducemin all axes");
    fails += kiln_optest_sweep("ReduceMin", "noop_with_empty_axes=1", 18, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 6), -2, 2, 1530)},
                               1, "reducemin noop");
    fails += kiln_optest_sweep("ReduceMin", "axes=[2,3]", 16, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 6), -2, 2, 1531)},
                               1, "reducemin axes attribute, NCHW spatial");
    fails += kiln_optest_sweep_tol("ReduceMin", "keepdims=0", 18, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 3000), -2, 2, 1532),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                                   1, 0.0001, 0, "reducemin long rows");
    fails += kiln_optest_sweep_tol("ReduceMin", "", 18, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(2000, 5), -2, 2, 1533),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0))},
                                   1, 0.002, 0, "reducemin long columns");
    fails += kiln_optest_sweep("ReduceMin", "", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 0, 4), -2, 2, 1534),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                               1, "reducemin an empty axis");
    /* random, for the backend sweep (tests/gpu/test_backend_ops.c): their gradient graphs
     * sweep kiln.ReduceMinGrad (axes as an input and as the attribute, keepdims both ways) */
    fails += kiln_optest_sweep("ReduceMin", "keepdims=1", 18, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 4, 5, 6), -2, 2, 7331),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "reducemin random axes 1,3 input");
    fails += kiln_optest_sweep("ReduceMin", "axes=[-1];keepdims=0", 13, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 7, 9), -2, 2, 7332)}, 1,
                               "reducemin random last axis attribute");
    return fails;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[4], *dx;
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 3, 1, 2, 0, -1));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(2, 5));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, -1));
    in[3] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-1));
    dx = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 0, 1, 0, 0, 5));
    fails += kiln_optest("ReduceMinGrad", "keepdims=0", 4, in, 1, &dx, 0, 0, "min grad last axis with a tie");
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(4, -1, 0, 2));
    in[1] = kt_make(KILN_F64, 2, KT_DIMS(1, 2), KT_VALS(3, 7));
    in[2] = kt_make(KILN_F64, 2, KT_DIMS(1, 2), KT_VALS(0, -1));
    in[3] = NULL;
    dx = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(0, 7, 3, 0));
    fails += kiln_optest_opset("ReduceMinGrad", "axes=[0]", 13, 4, in, 1, &dx, 0, 0, "min grad opset 13 axis 0");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_reduce_min = {
    .precision = KILN_PREC_LOW,
    .name = "ReduceMin", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
    .grad = grad,
};

const kiln_op_def kiln_op_reduce_min_grad = {
    .precision = KILN_PREC_FP32,
    .name = "ReduceMinGrad", .domain = "kiln", .min_inputs = 3, .max_inputs = 4,
    .min_outputs = 1, .max_outputs = 1, .value_inputs = 1u << 3,
    .infer = infer_grad, .cpu_forward = forward_grad,
    .cpu_workspace = kiln_reduce_grad_workspace, .test = KILN_OP_TESTS(test_grad),
};
