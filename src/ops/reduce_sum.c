/*
 * reduce_sum.c — ReduceSum: sum of the elements along `axes`.
 * Opset 11: axes attribute, keepdims. Opset 13+: axes is an optional int64 input (a value
 * input) and noop_with_empty_axes applies. Floats (summed in double) and all integer
 * dtypes (summed in 64 bits, wrapping like the output dtype). See reduce_common.h.
 * Gradient: kiln.ReduceSumGrad(X, dY, axes): dX = dY broadcast back over the reduced dims.
 */
#include "../core/optest.h"
#include "reduce_common.h"

enum { AXES_INPUT_OPSET = 13 };

static kiln_status infer(kiln_op_ctx *c) {
    return kiln_reduce_infer(c, AXES_INPUT_OPSET, true, false);
}
static kiln_status forward(kiln_op_ctx *c) {
    return kiln_reduce_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_SUM);
}
static kiln_status grad(kiln_grad_ctx *g) {
    return kiln_reduce_grad_rule(g, "ReduceSumGrad", KILN_REDUCE_SUM);
}
static kiln_status infer_grad(kiln_op_ctx *c) {
    return kiln_reduce_grad_infer(c, AXES_INPUT_OPSET, KILN_REDUCE_SUM);
}
static kiln_status forward_grad(kiln_op_ctx *c) {
    return kiln_reduce_grad_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_SUM);
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

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(6, 15));
    fails += kiln_optest("ReduceSum", "keepdims=1", 2, in, 1, &y, 0, 0, "sum axis 1 keepdims");

    /* (2,3,4) over axes {0,2}: sum_{a,c} 12a + 4j + c = 60 + 32j */
    in[0] = arange(KILN_F32, 3, KT_DIMS(2, 3, 4));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, -1));
    y = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(60, 92, 124));
    fails += kiln_optest("ReduceSum", "keepdims=0", 2, in, 1, &y, 0, 0, "sum axes 0,-1 f32");

    /* middle axis of (2,3,4): x[a,0,c]+x[a,1,c]+x[a,2,c] = 36a + 12 + 3c */
    in[0] = arange(KILN_F64, 3, KT_DIMS(2, 3, 4));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F64, 3, KT_DIMS(2, 1, 4), KT_VALS(12, 15, 18, 21, 48, 51, 54, 57));
    fails += kiln_optest("ReduceSum", "", 2, in, 1, &y, 0, 0, "sum middle axis f64");

    in[0] = kt_make(KILN_F16, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6.5));
    y = kt_scalar(KILN_F16, 21.5);
    fails += kiln_optest("ReduceSum", "keepdims=0", 1, in, 1, &y, 0, 0, "sum all f16 no axes");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4));
    fails += kiln_optest("ReduceSum", "noop_with_empty_axes=1", 1, in, 1, &y, 0, 0,
                         "sum noop with empty axes");

    in[0] = kt_make(KILN_I32, 2, KT_DIMS(2, 2), KT_VALS(1, -2, 3, 4));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0));
    y = kt_make(KILN_I32, 2, KT_DIMS(1, 2), KT_VALS(4, 2));
    fails += kiln_optest("ReduceSum", "", 2, in, 1, &y, 0, 0, "sum i32 axis 0");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 0), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0, 0));
    fails += kiln_optest("ReduceSum", "keepdims=0", 2, in, 1, &y, 0, 0, "sum over empty dim");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6));
    y = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(5, 7, 9));
    fails += kiln_optest_opset("ReduceSum", "axes=[0];keepdims=0", 11, 1, in, 1, &y, 0, 0,
                               "sum opset 11 axes attribute");

    /* big enough for the threaded path: sum_i 300 i + j = 300*299*300/2 + 300 j */
    in[0] = arange(KILN_F64, 2, KT_DIMS(300, 300));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0));
    y = kt_make(KILN_F64, 1, KT_DIMS(300), NULL);
    for (int j = 0; j < 300; j++) kiln_set_f64(y, j, 300.0 * 299 * 300 / 2 + 300.0 * j);
    fails += kiln_optest("ReduceSum", "keepdims=0", 2, in, 1, &y, 0, 0, "sum axis 0 (300,300)");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(2));
    fails += kiln_optest_fails("ReduceSum", "", 2, in, 1, KILN_ERR_SHAPE, "sum axis out of range");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, -1));
    fails += kiln_optest_fails("ReduceSum", "", 2, in, 1, KILN_ERR_SHAPE, "sum repeated axis");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("ReduceSum", "", 1, in, 1, KILN_ERR_TYPE, "sum rejects bool");

    /* gradients: every axes form (none, input, attribute at opset 11, noop) and keepdims */
    fails += kiln_reduce_gradcheck("ReduceSum", "", 13, -1, NULL, 1, "sum grad all axes");
    fails += kiln_reduce_gradcheck("ReduceSum", "keepdims=0", 13, 1, KT_DIMS(1), 2,
                                   "sum grad axis 1 no keepdims");
    fails += kiln_reduce_gradcheck("ReduceSum", "", 13, 2, KT_DIMS(0, -1), 3,
                                   "sum grad axes 0,-1 keepdims");
    fails += kiln_reduce_gradcheck("ReduceSum", "axes=[0,2];keepdims=0", 11, -1, NULL, 4,
                                   "sum grad opset 11 attribute axes");
    fails += kiln_reduce_gradcheck("ReduceSum", "noop_with_empty_axes=1", 13, -1, NULL, 5,
                                   "sum grad noop with empty axes");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("ReduceSum", "keepdims=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 291),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "reducesum random axes 1,3 of 2x3x17x19");
    fails += kiln_optest_sweep("ReduceSum", "keepdims=0", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 1, KT_DIMS(1031), -2, 2, 295)},
                               1, "reducesum random all of 1031");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("ReduceSum", "", 13, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 7), -2, 2, 1500),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                               1, "reducesum middle axis input");
    fails += kiln_optest_sweep("ReduceSum", "keepdims=0", 13, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 7), -2, 2, 1501),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, -1))},
                               1, "reducesum outer and inner axes");
    fails += kiln_optest_sweep("ReduceSum", "", 13, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 6, 33), -2, 2, 1502),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-1))},
                               1, "reducesum last axis");
    fails += kiln_optest_sweep("ReduceSum", "", 13, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 6, 9), -2, 2, 1503)},
                               1, "reducesum all axes");
    fails += kiln_optest_sweep("ReduceSum", "noop_with_empty_axes=1", 13, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 6), -2, 2, 1504)},
                               1, "reducesum noop");
    fails += kiln_optest_sweep("ReduceSum", "axes=[2,3]", 11, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 6), -2, 2, 1505)},
                               1, "reducesum axes attribute, NCHW spatial");
    fails += kiln_optest_sweep_tol("ReduceSum", "keepdims=0", 13, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 3000), -2, 2, 1506),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                                   1, 0.0001, 0, "reducesum long rows");
    fails += kiln_optest_sweep_tol("ReduceSum", "", 13, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(2000, 5), -2, 2, 1507),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0))},
                                   1, 0.002, 0, "reducesum long columns");
    fails += kiln_optest_sweep("ReduceSum", "", 13, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 0, 4), -2, 2, 1508),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                               1, "reducesum an empty axis");
    /* random, for the backend sweep (tests/gpu/test_backend_ops.c): their gradient graphs
     * sweep kiln.ReduceSumGrad (axes as an input and as the attribute, keepdims both ways) */
    fails += kiln_optest_sweep("ReduceSum", "keepdims=1", 13, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 4, 5, 6), -2, 2, 7301),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "reducesum random axes 1,3 input");
    fails += kiln_optest_sweep("ReduceSum", "axes=[-1];keepdims=0", 11, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 7, 9), -2, 2, 7302)}, 1,
                               "reducesum random last axis attribute");
    return fails;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[3], *dx;
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(1, 2));
    in[2] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    dx = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 1, 1, 2, 2, 2));
    fails += kiln_optest("ReduceSumGrad", "keepdims=0", 3, in, 1, &dx, 0, 0, "sum grad axis 1 dropped");
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(1, 2, 3));
    in[2] = NULL;
    dx = kt_make(KILN_F64, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 1, 2, 3));
    fails += kiln_optest_opset("ReduceSumGrad", "axes=[0]", 11, 3, in, 1, &dx, 0, 0,
                               "sum grad opset 11 axis 0 kept");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[2] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    fails += kiln_optest_fails("ReduceSumGrad", "", 3, in, 1, KILN_ERR_SHAPE, "sum grad dY of the wrong shape");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_reduce_sum = {
    .precision = KILN_PREC_FP32,
    .name = "ReduceSum", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
    .grad = grad,
};

const kiln_op_def kiln_op_reduce_sum_grad = {
    .precision = KILN_PREC_FP32,
    .name = "ReduceSumGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 1, .value_inputs = 1u << 2, .shape_only_inputs = 1u << 0,
    .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};
