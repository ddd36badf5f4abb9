/* gather_elements.c — GatherElements: out[i...] = data[i... with index `axis` replaced by
 * indices[i...]] (opsets 11, 13). indices (int32 or int64) has data's rank and, off the
 * axis, dims no larger than data's. The
 * output has indices' shape and data's dtype. Negative indices count from the end; an
 * index outside [-dim, dim) is an error at run time (KILN_ERR_INVALID_ARGUMENT), checked
 * before any output is written. Any data dtype. */
#include "../core/optest.h"

#include <inttypes.h>
#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "data dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, ix->dtype == KILN_I32 || ix->dtype == KILN_I64, KILN_ERR_TYPE,
                  "indices must be int32 or int64, got %s", kiln_dtype_name(ix->dtype));
    KILN_OP_CHECK(c, x->ndim >= 1, KILN_ERR_SHAPE, "data must have rank >= 1");
    KILN_OP_CHECK(c, ix->ndim == x->ndim, KILN_ERR_SHAPE, "indices has rank %d, data rank %d (they must agree)",
                  ix->ndim, x->ndim);
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    KILN_OP_CHECK(c, kiln_norm_axis(&axis, x->ndim), KILN_ERR_SHAPE, "axis %" PRId64 " is out of range for rank %d",
                  kiln_attr_int(c->node, "axis", 0), x->ndim);
    for (int d = 0; d < x->ndim; d++)
        KILN_OP_CHECK(c, d == axis || ix->dims[d] <= x->dims[d], KILN_ERR_SHAPE,
                      "indices dim %d is %" PRId64 ", larger than data's %" PRId64, d, ix->dims[d], x->dims[d]);
    kiln_tensor_set_shape(c->out[0], x->dtype, ix->ndim, ix->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1];
    kiln_tensor *y = c->out[0];
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    kiln_norm_axis(&axis, x->ndim);
    const int64_t n = kiln_tensor_numel(y), dim = x->dims[axis];
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = kiln_get_i64(ix, i);
        KILN_OP_CHECK(c, v >= -dim && v < dim, KILN_ERR_INVALID_ARGUMENT,
                      "indices[%" PRId64 "] = %" PRId64 " is out of range [-%" PRId64 ", %" PRId64 ") of axis %" PRId64,
                      i, v, dim, dim, axis);
    }
    int64_t xs[KILN_MAX_DIMS];
    kiln_strides(x->ndim, x->dims, xs);
    const size_t es = kiln_dtype_size(x->dtype);
    const char *xp = x->data;
    char *yp = y->data;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = kiln_get_i64(ix, i);
        if (v < 0) v += dim;
        /* i's coordinates in indices' shape, at data's strides, the axis replaced by v */
        int64_t rem = i, off = 0;
        for (int d = ix->ndim - 1; d >= 0; d--) {
            const int64_t coord = rem % ix->dims[d];
            rem /= ix->dims[d];
            off += (d == axis ? v : coord) * xs[d];
        }
        memcpy(yp + (size_t)i * es, xp + (size_t)off * es, es);
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y;
    /* the ONNX spec's examples */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(0, 0, 1, 0));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 1, 4, 3));
    fails += kiln_optest("GatherElements", "axis=1", 2, in, 1, &y, 0, 0, "gather_elements axis 1");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 3), KT_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
    in[1] = kt_make(KILN_I32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 0, 2, 0, 0));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(4, 8, 3, 7, 2, 3));
    fails += kiln_optest("GatherElements", "", 2, in, 1, &y, 0, 0, "gather_elements axis 0 i32 indices");
    in[0] = kt_make(KILN_I64, 2, KT_DIMS(3, 3), KT_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(-1, -2, 0, -2, 0, 0));
    y = kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(7, 5, 3, 4, 2, 3));
    fails += kiln_optest("GatherElements", "axis=0", 2, in, 1, &y, 0, 0, "gather_elements negative indices");
    /* indices longer than data along the axis, 3-D, last axis */
    in[0] = kt_make(KILN_F16, 3, KT_DIMS(1, 2, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_I64, 3, KT_DIMS(1, 2, 3), KT_VALS(1, 1, 0, 0, 1, 0));
    y = kt_make(KILN_F16, 3, KT_DIMS(1, 2, 3), KT_VALS(2, 2, 1, 3, 4, 3));
    fails += kiln_optest("GatherElements", "axis=-1", 2, in, 1, &y, 0, 0, "gather_elements 3-D last axis");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 1), KT_VALS(2));
    fails += kiln_optest_fails("GatherElements", "axis=1", 2, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "gather_elements index out of range");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), NULL);
    fails += kiln_optest_fails("GatherElements", "", 2, in, 1, KILN_ERR_SHAPE, "gather_elements rank mismatch");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(3, 1), NULL);
    fails += kiln_optest_fails("GatherElements", "axis=1", 2, in, 1, KILN_ERR_SHAPE,
                               "gather_elements indices larger off the axis");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    fails += kiln_optest_fails("GatherElements", "", 2, in, 1, KILN_ERR_TYPE, "gather_elements float indices");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 2), NULL);
    fails += kiln_optest_fails("GatherElements", "axis=2", 2, in, 1, KILN_ERR_SHAPE, "gather_elements bad axis");
    fails += kiln_optest_sweep("GatherElements", "axis=2", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -3, 3, 5601),
                                                 kt_rand(KILN_I64, 4, KT_DIMS(2, 3, 20, 19), -17, 17, 5602)},
                               1, "gather_elements random axis 2");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_gather_elements = {
    .precision = KILN_PREC_FOLLOW,
    .name = "GatherElements", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
