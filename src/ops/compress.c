/* compress.c — Compress(input, condition): the slices of input along `axis` whose entry in
 * the 1-D bool condition is true (without axis: the flattened input's elements); opsets 9
 * and 11 (negative axis). condition may be shorter than the axis (the rest counts as
 * false), not longer. The output's size depends on condition's values, so condition is a
 * value input: known when the plan is built (a constant, or a graph input's value). Any
 * input dtype. */
#include "../core/optest.h"

#include <inttypes.h>
#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *cond = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "input dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, cond->dtype == KILN_BOOL && cond->ndim == 1, KILN_ERR_TYPE, "condition must be a 1-D bool tensor");
    KILN_OP_CHECK(c, cond->data != NULL || kiln_tensor_numel(cond) == 0, KILN_ERR_UNSUPPORTED,
                  "condition must be known when the plan is built (it decides the output's size)");
    const bool has_axis = kiln_node_attr(c->node, "axis") != NULL;
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    KILN_OP_CHECK(c, !has_axis || kiln_norm_axis(&axis, x->ndim), KILN_ERR_SHAPE,
                  "axis=%" PRId64 " is out of range for rank %d", kiln_attr_int(c->node, "axis", 0), x->ndim);
    const int64_t len = has_axis ? x->dims[axis] : kiln_tensor_numel(x), n = cond->dims[0];
    KILN_OP_CHECK(c, n <= len, KILN_ERR_SHAPE, "condition has %" PRId64 " entries for %" PRId64, n, len);
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) count += ((const uint8_t *)cond->data)[i] != 0;
    if (!has_axis) {
        kiln_tensor_set_shape(c->out[0], x->dtype, 1, &count);
        return KILN_OK;
    }
    int64_t dims[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) dims[d] = d == axis ? count : x->dims[d];
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *cond = c->in[1];
    const bool has_axis = kiln_node_attr(c->node, "axis") != NULL;
    int64_t axis = kiln_attr_int(c->node, "axis", 0), outer = 1, inner = 1, len;
    if (has_axis) {
        kiln_norm_axis(&axis, x->ndim);
        for (int d = 0; d < axis; d++) outer *= x->dims[d];
        for (int d = (int)axis + 1; d < x->ndim; d++) inner *= x->dims[d];
        len = x->dims[axis];
    } else {
        len = kiln_tensor_numel(x);
    }
    const int64_t n = cond->dims[0];
    const uint8_t *cv = cond->data;
    const size_t row = (size_t)inner * kiln_dtype_size(x->dtype);
    char *y = c->out[0]->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < n && i < len; i++)
            if (cv[i]) {
                memcpy(y, (const char *)x->data + (size_t)(o * len + i) * row, row);
                y += row;
            }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y;
    const double v6[6] = {1, 2, 3, 4, 5, 6};
    /* the ONNX spec's examples */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 2), v6);
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(0, 1, 1));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(3, 4, 5, 6));
    fails += kiln_optest("Compress", "axis=0", 2, in, 1, &y, 0, 0, "compress axis 0");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 2), v6);
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(2), KT_VALS(0, 1));
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 1), KT_VALS(2, 4, 6));
    fails += kiln_optest("Compress", "axis=-1", 2, in, 1, &y, 0, 0, "compress axis -1");
    in[0] = kt_make(KILN_I32, 2, KT_DIMS(3, 2), v6);
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(5), KT_VALS(0, 1, 0, 0, 1));
    y = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(2, 5));
    fails += kiln_optest("Compress", "", 2, in, 1, &y, 0, 0, "compress flattened, short condition");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 2), v6);
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(0, 0, 0));
    y = kt_make(KILN_F32, 2, KT_DIMS(0, 2), NULL);
    fails += kiln_optest("Compress", "axis=0", 2, in, 1, &y, 0, 0, "compress nothing");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 2), v6);
    in[1] = kt_make(KILN_BOOL, 1, KT_DIMS(4), KT_VALS(0, 0, 0, 1));
    fails += kiln_optest_fails("Compress", "axis=0", 2, in, 1, KILN_ERR_SHAPE, "compress condition too long");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 2), v6);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(0, 0, 1));
    fails += kiln_optest_fails("Compress", "axis=0", 2, in, 1, KILN_ERR_TYPE, "compress int condition");
    fails += kiln_optest_sweep("Compress", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 17, 5), -3, 3, 6901),
                                                 kt_rand(KILN_BOOL, 1, KT_DIMS(15), 0, 2, 6902)},
                               1, "compress random axis 1");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_compress = {
    .precision = KILN_PREC_FOLLOW,
    .name = "Compress", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
