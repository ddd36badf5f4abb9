/* hardmax.c — Hardmax: 1 at the first largest element of each row, 0 elsewhere. Opset 13+:
 * the row is dim `axis` (default -1). Before opset 13 (1, 11) the input is seen as a
 * matrix (dims[:axis] x dims[axis:]) with axis default 1, and each matrix row is one
 * row. Float dtypes; a NaN counts as the largest value (as numpy's argmax). */
#include "../core/optest.h"

#include <math.h>
#include <string.h>

/* The input as (outer, n, inner): rows of n elements at stride inner. */
static bool rows_of(const kiln_op_ctx *c, int64_t *outer, int64_t *n, int64_t *inner, int64_t *axis_out) {
    const kiln_tensor *x = c->in[0];
    const bool old = c->node->opset < 13;
    int64_t axis = kiln_attr_int(c->node, "axis", old ? 1 : -1);
    if (x->ndim == 0 && old && (axis == 0 || axis == -1)) axis = 0;
    else if (!kiln_norm_axis(&axis, x->ndim) && !(old && axis == x->ndim)) return false;
    *axis_out = axis;
    *outer = 1;
    *n = 1;
    *inner = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < axis) *outer *= x->dims[d];
        else if (d == axis || old) *n *= x->dims[d];
        else *inner *= x->dims[d];
    }
    return true;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE, "input dtype %s is not a float type",
                  kiln_dtype_name(x->dtype));
    int64_t outer, n, inner, axis;
    KILN_OP_CHECK(c, rows_of(c, &outer, &n, &inner, &axis), KILN_ERR_SHAPE, "axis=%lld is out of range for rank %d",
                  (long long)kiln_attr_int(c->node, "axis", c->node->opset < 13 ? 1 : -1), x->ndim);
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    int64_t outer, n, inner, axis;
    rows_of(c, &outer, &n, &inner, &axis);
    memset(y->data, 0, kiln_tensor_nbytes(y));
    if (n == 0) return KILN_OK;
    for (int64_t oi = 0; oi < outer * inner; oi++) {
        const int64_t base = (oi / inner) * n * inner + oi % inner;
        int64_t best = 0;
        double bv = kiln_get_f64(x, base);
        for (int64_t k = 1; k < n && !isnan(bv); k++) {
            const double v = kiln_get_f64(x, base + k * inner);
            if (v > bv || isnan(v)) {
                bv = v;
                best = k;
            }
        }
        kiln_set_f64(y, base + best * inner, 1.0);
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *x, *y;
    /* the ONNX spec's examples */
    x = kt_make(KILN_F32, 2, KT_DIMS(4, 4), KT_VALS(3, 0, 1, 2, 2, 5, 1, 0, 0, 1, 3, 2, 0, 1, 2, 3));
    y = kt_make(KILN_F32, 2, KT_DIMS(4, 4), KT_VALS(1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1));
    fails += kiln_optest("Hardmax", "", 1, &x, 1, &y, 0, 0, "hardmax example");
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 4), KT_VALS(2, 2, 2, 2, 3, 3, 3, 3));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 4), KT_VALS(1, 0, 0, 0, 1, 0, 0, 0));
    fails += kiln_optest("Hardmax", "", 1, &x, 1, &y, 0, 0, "hardmax first of ties");
    /* (2,3,2) along axis 1 (opset 13) */
    x = kt_make(KILN_F64, 3, KT_DIMS(2, 3, 2), KT_VALS(0, 5, 4, 1, 2, 1, -1, -9, -3, -8, -2, -7));
    y = kt_make(KILN_F64, 3, KT_DIMS(2, 3, 2), KT_VALS(0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 1));
    fails += kiln_optest("Hardmax", "axis=1", 1, &x, 1, &y, 0, 0, "hardmax middle axis");
    /* opset 11, axis 1: each (3,2) block flattened to one row of 6 */
    x = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 2), KT_VALS(0, 5, 4, 1, 2, 1, -1, -9, -3, -8, -2, -7));
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 2), KT_VALS(0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0));
    fails += kiln_optest_opset("Hardmax", "", 11, 1, &x, 1, &y, 0, 0, "hardmax opset 11 coerced to 2-D");
    x = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(1, NAN, 2));
    y = kt_make(KILN_F16, 1, KT_DIMS(3), KT_VALS(0, 1, 0));
    fails += kiln_optest("Hardmax", "", 1, &x, 1, &y, 0, 0, "hardmax NaN wins");
    x = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("Hardmax", "axis=2", 1, &x, 1, KILN_ERR_SHAPE, "hardmax bad axis");
    x = kt_make(KILN_I32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("Hardmax", "", 1, &x, 1, KILN_ERR_TYPE, "hardmax rejects i32");
    fails += kiln_optest_sweep("Hardmax", "axis=1", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 33, 5, 7), -3, 3, 5901)},
                               1, "hardmax random axis 1");
    fails += kiln_optest_sweep("Hardmax", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(7, 300), -3, 3, 5902)},
                               1, "hardmax random last axis");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_hardmax = {
    .precision = KILN_PREC_LOW,
    .name = "Hardmax", .min_inputs = 1, .max_inputs = 1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
