/*
 * reduce_l2.c — ReduceL2: the square root of the sum of squares of the elements along `axes`.
 * Opsets 11/13: axes attribute, keepdims. Opset 18+: axes is an optional int64 input (a
 * value input) and noop_with_empty_axes applies. Float and integer dtypes; floats
 * accumulate in double. See reduce_common.h.
 * Gradient: kiln.ReduceL2Grad(X, dY, Y, axes): dX = dY / Y * X, 0 where Y = 0 (as
 * torch.linalg.vector_norm's backward; F.normalize clamps such a norm anyway).
 */
#include "../core/optest.h"
#include "reduce_common.h"

#include <math.h>

enum { AXES_INPUT_OPSET = 18 };

static kiln_status infer(kiln_op_ctx *c) { return kiln_reduce_infer(c, AXES_INPUT_OPSET, true, false); }
static kiln_status forward(kiln_op_ctx *c) { return kiln_reduce_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_L2); }
static kiln_status grad(kiln_grad_ctx *g) { return kiln_reduce_grad_rule(g, "ReduceL2Grad", KILN_REDUCE_L2); }
static kiln_status infer_grad(kiln_op_ctx *c) { return kiln_reduce_grad_infer(c, AXES_INPUT_OPSET, KILN_REDUCE_L2); }
static kiln_status forward_grad(kiln_op_ctx *c) {
    return kiln_reduce_grad_forward(c, AXES_INPUT_OPSET, KILN_REDUCE_L2);
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    /* the ONNX spec's example data, 1..12 in (3,2,2); expected values from Python */
    static const double ex[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    kiln_tensor *in[2], *y;
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(3, 2, 2), ex);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 3, KT_DIMS(3, 1, 2), KT_VALS(3.1622776601683795, 4.4721359549995796, 8.6023252670426267, 10, 14.212670403551895, 15.620499351813308));
    fails += kiln_optest("ReduceL2", "", 2, in, 1, &y, 1e-6, 1e-6, "reduce_l2 axis 1 keepdims");
    in[0] = kt_make(KILN_F64, 3, KT_DIMS(3, 2, 2), ex);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-1));
    y = kt_make(KILN_F64, 2, KT_DIMS(3, 2), KT_VALS(2.2360679774997898, 5, 7.810249675906654, 10.63014581273465, 13.45362404707371, 16.278820596099706));
    fails += kiln_optest("ReduceL2", "keepdims=0", 2, in, 1, &y, 0, 1e-14, "reduce_l2 axis -1 f64");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(3, 2, 2), ex);
    y = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(25.495097567963924));
    fails += kiln_optest("ReduceL2", "", 1, in, 1, &y, 1e-6, 1e-6, "reduce_l2 all axes");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(3, 2, 2), ex);
    y = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(15.716233645501712, 20.074859899884732));
    fails += kiln_optest_opset("ReduceL2", "axes=[0,2];keepdims=0", 13, 1, in, 1, &y, 1e-6, 1e-6,
                               "reduce_l2 opset 13 axes attribute");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(-2.5, 1, 0.5, -3, 2, 4, -1, 1.5, 3, -0.5, 2, 1));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 1), KT_VALS(4.0620192023179804, 4.8218253804964775, 3.7749172176353749));
    fails += kiln_optest("ReduceL2", "", 2, in, 1, &y, 1e-6, 1e-6, "reduce_l2 signed values");
    /* an empty reduction gives the identity */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 0), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    y = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0, 0));
    fails += kiln_optest("ReduceL2", "keepdims=0", 2, in, 1, &y, 0, 0, "reduce_l2 empty reduction");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(2));
    fails += kiln_optest_fails("ReduceL2", "", 2, in, 1, KILN_ERR_SHAPE, "reduce_l2 axis out of range");
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("ReduceL2", "", 1, in, 1, KILN_ERR_TYPE, "reduce_l2 rejects bool");
    fails += kiln_optest_sweep("ReduceL2", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 5720),
                                                 kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "reduce_l2 random axes 1,3");
    fails += kiln_optest_sweep("ReduceL2", "keepdims=0", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(5, 33, 7), -3, 3, 5721),
                                                 kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                               1, "reduce_l2 random middle axis");
    /* gradients against central differences (swin_v2: F.normalize over the last axis) */
    fails += kiln_reduce_gradcheck("ReduceL2", "", 18, 1, KT_DIMS(-1), 31, "l2 grad last axis");
    fails += kiln_reduce_gradcheck("ReduceL2", "axes=[0,2];keepdims=0", 13, -1, NULL, 32, "l2 grad axes 0,2 dropped");
    fails += kiln_reduce_gradcheck("ReduceL2", "keepdims=0", 18, -1, NULL, 33, "l2 grad all axes");
    return fails;
}

/* kiln.ReduceL2Grad by hand: dX = dY / Y * X per row, a zero row (Y = 0) gets 0 (not NaN) */
static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[4], *dx;
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(3, 4, 0, 0, -1, 0));
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(3, 1), KT_VALS(10, 7, -2));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(3, 1), KT_VALS(5, 0, 1));
    in[3] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1));
    dx = kt_make(KILN_F32, 2, KT_DIMS(3, 2), KT_VALS(6, 8, 0, 0, 2, 0));
    fails += kiln_optest("ReduceL2Grad", "", 4, in, 1, &dx, 0, 0, "l2 grad by hand, a zero row");
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 2, 4));
    in[1] = kt_make(KILN_F64, 0, NULL, KT_VALS(5));
    in[2] = kt_make(KILN_F64, 0, NULL, KT_VALS(5));
    in[3] = NULL;
    dx = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 2, 4));
    fails += kiln_optest("ReduceL2Grad", "keepdims=0", 4, in, 1, &dx, 0, 1e-15, "l2 grad all axes f64");
    /* for the backend sweep: swin_v2's shape class (rows of 32 over several blocks) */
    kiln_tensor *x = kt_rand(KILN_F32, 3, KT_DIMS(4, 37, 32), -2, 2, 34);
    kiln_tensor *y = kt_make(KILN_F32, 3, KT_DIMS(4, 37, 1), NULL);
    for (int64_t r = 0; x && y && r < 4 * 37; r++) {
        double s = 0;
        for (int k = 0; k < 32; k++) s += kiln_get_f64(x, r * 32 + k) * kiln_get_f64(x, r * 32 + k);
        kiln_set_f64(y, r, sqrt(s));
    }
    fails += kiln_optest_sweep("ReduceL2Grad", "", 0, 4,
                               (kiln_tensor *[]){x, kt_rand(KILN_F32, 3, KT_DIMS(4, 37, 1), -1, 1, 35), y,
                                                 kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-1))},
                               1, "l2 grad 4x37x32 last axis");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_reduce_l2 = {
    .precision = KILN_PREC_FP32,
    .name = "ReduceL2", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
    .grad = grad,
};

const kiln_op_def kiln_op_reduce_l2_grad = {
    .precision = KILN_PREC_FP32,
    .name = "ReduceL2Grad", .domain = "kiln", .min_inputs = 3, .max_inputs = 4,
    .min_outputs = 1, .max_outputs = 1, .value_inputs = 1u << 3,
    .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};
