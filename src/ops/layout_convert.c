/*
 * layout_convert.c — kiln.ToNHWC and kiln.ToNCHW (internal ops, domain "kiln"): change the
 * memory layout of a 4-D tensor, X (N, C, H, W) -> Y (N, C, H, W), any dtype.
 *
 * Dimensions are always logical NCHW; only the bytes move. The layout pass
 * (src/passes/layout.c) inserts these nodes where a chain of NHWC kernels meets NCHW
 * ones on a device backend, and each device kernel reads the format of its tensors. As
 * functions they are identities, and so is their CPU reference (a copy): the CPU backend
 * keeps every tensor NCHW, which lets tests check on the CPU that the layout pass leaves
 * the function unchanged. Not differentiable (inference graphs only).
 */
#include "../core/optest.h"
#include "movement.h"

#include <stdio.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "input dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim == 4, KILN_ERR_SHAPE, "input has rank %d; layouts are defined for 4-D tensors",
                  x->ndim);
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) { return kiln_copy_input0(c); }

/* One op, both directions: the values must come through unchanged in every dtype. */
static int test_op(const char *op) {
    int fails = 0;
    char label[64];
    const double v[] = {-1, 0.5, 2, -3, 4.5, -0.25, 7, 8, 9, -10, 11, 12};
    for (int k = 0; k < 4; k++) {
        const kiln_dtype dt[] = {KILN_F32, KILN_F16, KILN_I64, KILN_BOOL};
        const double *vals = dt[k] == KILN_BOOL ? KT_VALS(1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0) : v;
        kiln_tensor *x = kt_make(dt[k], 4, KT_DIMS(1, 2, 3, 2), vals);
        kiln_tensor *y = kt_make(dt[k], 4, KT_DIMS(1, 2, 3, 2), vals);
        snprintf(label, sizeof label, "%s %s identity", op, kiln_dtype_name(dt[k]));
        fails += kiln_optest_opset(op, "", 0, 1, &x, 1, &y, 0, 0, label);
    }
    kiln_tensor *e = kt_make(KILN_F32, 4, KT_DIMS(2, 0, 3, 3), NULL);
    kiln_tensor *ey = kt_make(KILN_F32, 4, KT_DIMS(2, 0, 3, 3), NULL);
    snprintf(label, sizeof label, "%s empty", op);
    fails += kiln_optest_opset(op, "", 0, 1, &e, 1, &ey, 0, 0, label);
    kiln_tensor *r3 = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), NULL);
    snprintf(label, sizeof label, "%s rejects rank 3", op);
    fails += kiln_optest_fails(op, "", 1, &r3, 1, KILN_ERR_SHAPE, label);
    return fails;
}

static int test_to_nhwc(void) { return test_op("ToNHWC"); }
static int test_to_nchw(void) { return test_op("ToNCHW"); }

const kiln_op_def kiln_op_to_nhwc = {
    .name = "ToNHWC", .domain = "kiln", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .test = test_to_nhwc,
};

const kiln_op_def kiln_op_to_nchw = {
    .name = "ToNCHW", .domain = "kiln", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1,
    .max_outputs = 1, .infer = infer, .cpu_forward = forward, .test = test_to_nchw,
};
