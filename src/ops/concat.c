/* concat.c — Concat: joins its inputs along `axis` (required; negative from opset 11).
 * Every input has the same dtype and rank and the same dims except on axis; inputs with
 * a zero-size axis are allowed. Any dtype (opsets 11..21). */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>
#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x0 = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x0->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x0->dtype));
    KILN_OP_CHECK(c, kiln_node_attr(c->node, "axis") != NULL, KILN_ERR_SHAPE,
                  "attribute axis is required");
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    KILN_OP_CHECK(c, x0->ndim > 0, KILN_ERR_SHAPE, "cannot concatenate scalars");
    KILN_OP_CHECK(c, kiln_norm_axis(&axis, x0->ndim), KILN_ERR_SHAPE,
                  "axis %" PRId64 " is out of range for rank %d",
                  kiln_attr_int(c->node, "axis", 0), x0->ndim);
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, x0->dims, sizeof dims);
    dims[axis] = 0;
    for (int i = 0; i < c->n_in; i++) {
        const kiln_tensor *x = c->in[i];
        KILN_OP_CHECK(c, x != NULL, KILN_ERR_SHAPE, "input %d is missing", i);
        KILN_OP_CHECK(c, x->dtype == x0->dtype, KILN_ERR_TYPE,
                      "input %d has dtype %s, input 0 has %s", i, kiln_dtype_name(x->dtype),
                      kiln_dtype_name(x0->dtype));
        KILN_OP_CHECK(c, x->ndim == x0->ndim, KILN_ERR_SHAPE,
                      "input %d has rank %d, input 0 has rank %d", i, x->ndim, x0->ndim);
        for (int d = 0; d < x0->ndim; d++)
            KILN_OP_CHECK(c, d == axis || x->dims[d] == x0->dims[d], KILN_ERR_SHAPE,
                          "input %d has dim %d = %" PRId64 " but input 0 has %" PRId64
                          " (only axis %" PRId64 " may differ)",
                          i, d, x->dims[d], x0->dims[d], axis);
        dims[axis] += x->dims[axis];
    }
    kiln_tensor_set_shape(c->out[0], x0->dtype, x0->ndim, dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_tensor *y = c->out[0];
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    kiln_norm_axis(&axis, y->ndim);
    size_t es = kiln_dtype_size(y->dtype);
    /* y viewed as (outer, dims[axis] * inner); each input contributes a block of each row */
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= y->dims[d];
    for (int d = (int)axis + 1; d < y->ndim; d++) inner *= y->dims[d];
    size_t row = (size_t)(y->dims[axis] * inner) * es;
    size_t at = 0;
    for (int i = 0; i < c->n_in; i++) {
        const kiln_tensor *x = c->in[i];
        size_t block = (size_t)(x->dims[axis] * inner) * es;
        if (block == 0) continue;
        const char *src = x->data;
        char *dst = (char *)y->data + at;
        for (int64_t o = 0; o < outer; o++) memcpy(dst + o * row, src + o * block, block);
        at += block;
    }
    return KILN_OK;
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *y;
    /* expected values from numpy.concatenate */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 1, 2, 3, 4, 5));
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(10, 11, 12, 13));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(20, 21));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 6), KT_VALS(0, 1, 2, 10, 11, 20, 3, 4, 5, 12, 13, 21));
    fails += kiln_optest("Concat", "axis=1", 3, in, 1, &y, 0, 0, "concat axis 1, three inputs");

    in[0] = kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(0, 1, 2, 3, 4, 5));
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(100, 101, 102, 103, 104, 105));
    y = kt_make(KILN_I64, 2, KT_DIMS(4, 3),
                KT_VALS(0, 1, 2, 3, 4, 5, 100, 101, 102, 103, 104, 105));
    fails += kiln_optest("Concat", "axis=-2", 2, in, 1, &y, 0, 0, "concat axis -2 i64");

    in[0] = kt_make(KILN_BOOL, 2, KT_DIMS(2, 0), NULL);
    in[1] = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 0, 0, 1));
    y = kt_make(KILN_BOOL, 2, KT_DIMS(2, 2), KT_VALS(1, 0, 0, 1));
    fails += kiln_optest("Concat", "axis=1", 2, in, 1, &y, 0, 0, "concat with an empty input");

    in[0] = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.5, 1.5));
    y = kt_make(KILN_F16, 1, KT_DIMS(2), KT_VALS(0.5, 1.5));
    fails += kiln_optest("Concat", "axis=0", 1, in, 1, &y, 0, 0, "concat one input");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(3, 2), NULL);
    fails += kiln_optest_fails("Concat", "axis=1", 2, in, 1, KILN_ERR_SHAPE,
                               "concat mismatched dims");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 1), NULL);
    fails += kiln_optest_fails("Concat", "axis=0", 2, in, 1, KILN_ERR_SHAPE,
                               "concat mismatched ranks");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("Concat", "axis=0", 2, in, 1, KILN_ERR_TYPE,
                               "concat mismatched dtypes");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("Concat", "axis=2", 2, in, 1, KILN_ERR_SHAPE, "concat axis 2");
    return fails;
}

const kiln_op_def kiln_op_concat = {
    .name = "Concat", .min_inputs = 1, .max_inputs = -1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = test,
};
