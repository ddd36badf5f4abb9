/* one_hot.c — OneHot(indices, depth, values): for each index, a row of `depth` elements
 * all values[0] (off) but values[1] (on) at the index; the new dim is inserted at `axis`
 * (default -1: last). Opsets 9 and 11. indices: any integer or float dtype (floats are
 * truncated); a negative index counts from the end (index + depth), one still outside
 * [0, depth) gives a row of all off. depth: a scalar or 1-element tensor of any integer or
 * float dtype, read when the plan is built (it is the output's size). values: 2 elements,
 * whose dtype is the output's. */
#include "../core/optest.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *ix = c->in[0], *dp = c->in[1], *v = c->in[2];
    KILN_OP_CHECK(c, kiln_dtype_is_int(ix->dtype) || kiln_dtype_is_float(ix->dtype), KILN_ERR_TYPE,
                  "indices dtype %s is not numeric", kiln_dtype_name(ix->dtype));
    KILN_OP_CHECK(c, (kiln_dtype_is_int(dp->dtype) || kiln_dtype_is_float(dp->dtype)) && kiln_tensor_numel(dp) == 1 &&
                         dp->ndim <= 1,
                  KILN_ERR_TYPE, "depth must be a numeric scalar or 1-element tensor");
    KILN_OP_CHECK(c, dp->data != NULL, KILN_ERR_UNSUPPORTED, "depth must be known when the plan is built");
    KILN_OP_CHECK(c, v->ndim == 1 && v->dims[0] == 2, KILN_ERR_SHAPE, "values must have 2 elements [off, on]");
    KILN_OP_CHECK(c, kiln_dtype_size(v->dtype) > 0, KILN_ERR_TYPE, "values dtype %s is not supported",
                  kiln_dtype_name(v->dtype));
    KILN_OP_CHECK(c, ix->ndim + 1 <= KILN_MAX_DIMS, KILN_ERR_SHAPE, "indices rank %d is too large", ix->ndim);
    const double depth_f = kiln_get_f64(dp, 0);
    KILN_OP_CHECK(c, depth_f >= 1 && depth_f < (double)((int64_t)1 << 40), KILN_ERR_INVALID_ARGUMENT,
                  "depth = %g must be at least 1", depth_f);
    const int64_t depth = (int64_t)depth_f;
    int64_t axis = kiln_attr_int(c->node, "axis", -1);
    KILN_OP_CHECK(c, kiln_norm_axis(&axis, ix->ndim + 1), KILN_ERR_SHAPE, "axis=%" PRId64 " is out of range for rank %d",
                  kiln_attr_int(c->node, "axis", -1), ix->ndim + 1);
    int64_t dims[KILN_MAX_DIMS];
    for (int d = 0, s = 0; d < ix->ndim + 1; d++) dims[d] = d == axis ? depth : ix->dims[s++];
    kiln_tensor_set_shape(c->out[0], v->dtype, ix->ndim + 1, dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *ix = c->in[0], *v = c->in[2];
    kiln_tensor *y = c->out[0];
    int64_t axis = kiln_attr_int(c->node, "axis", -1);
    kiln_norm_axis(&axis, y->ndim);
    const int64_t depth = y->dims[axis];
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= y->dims[d];
    for (int d = (int)axis + 1; d < y->ndim; d++) inner *= y->dims[d];
    const size_t es = kiln_dtype_size(v->dtype);
    const char *off = v->data, *on = (const char *)v->data + es;
    char *yp = y->data; // (outer, depth, inner)
    const bool fl = kiln_dtype_is_float(ix->dtype);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const int64_t at = o * inner + i; /* the index's flat position in indices */
            int64_t k = fl ? (int64_t)trunc(kiln_get_f64(ix, at)) : kiln_get_i64(ix, at);
            if (ix->dtype == KILN_U64 && k < 0) k = depth; /* above INT64_MAX: out of range */
            if (k < 0) k += depth;
            for (int64_t j = 0; j < depth; j++)
                memcpy(yp + (size_t)((o * depth + j) * inner + i) * es, j == k ? on : off, es);
        }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *y;
    /* the ONNX spec's examples */
    in[0] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(1, 9, 2));
    in[1] = kt_scalar(KILN_I64, 10);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(0, 1));
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 10),
                KT_VALS(0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0));
    fails += kiln_optest("OneHot", "", 3, in, 1, &y, 0, 0, "one_hot last axis");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(0, 7, 8, 1.9));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(3));
    in[2] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(1, 3));
    y = kt_make(KILN_I32, 3, KT_DIMS(2, 3, 2), KT_VALS(3, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1, 1));
    fails += kiln_optest("OneHot", "axis=1", 3, in, 1, &y, 0, 0, "one_hot axis 1, float indices, out of range");
    in[0] = kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(-1, -3, -4));
    in[1] = kt_scalar(KILN_I32, 3);
    in[2] = kt_make(KILN_F64, 1, KT_DIMS(2), KT_VALS(-2, 5));
    y = kt_make(KILN_F64, 2, KT_DIMS(3, 3), KT_VALS(-2, 5, -2, -2, -2, -2, 5, -2, -2));
    fails += kiln_optest("OneHot", "axis=0", 3, in, 1, &y, 0, 0, "one_hot negative indices, axis 0");
    in[0] = kt_make(KILN_I64, 1, KT_DIMS(3), NULL);
    in[1] = kt_scalar(KILN_I64, 0);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("OneHot", "", 3, in, 1, KILN_ERR_INVALID_ARGUMENT, "one_hot depth 0");
    in[0] = kt_make(KILN_I64, 1, KT_DIMS(3), NULL);
    in[1] = kt_scalar(KILN_I64, 4);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("OneHot", "", 3, in, 1, KILN_ERR_SHAPE, "one_hot 3 values");
    in[0] = kt_make(KILN_I64, 1, KT_DIMS(3), NULL);
    in[1] = kt_scalar(KILN_I64, 4);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("OneHot", "axis=2", 3, in, 1, KILN_ERR_SHAPE, "one_hot bad axis");
    fails += kiln_optest_sweep("OneHot", "axis=1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(5, 7), -12, 12, 6101),
                                                 kt_scalar(KILN_I64, 11), kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(-1, 2))},
                               1, "one_hot random axis 1");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_one_hot = {
    .precision = KILN_PREC_ANY,
    .name = "OneHot", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 1, .out_dtype = {KILN_DT_IN2}, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
