/* gather.c — Gather: picks slices of data along `axis` (default 0, may be negative) by
 * int32 or int64 indices (opsets 11..21). Output shape: data.shape[:axis] + indices.shape
 * + data.shape[axis+1:]. Negative indices count from the end; an index outside
 * [-dim, dim) is an error at run time (KILN_ERR_INVALID_ARGUMENT), checked before any
 * output is written. Any data dtype. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>
#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, ix->dtype == KILN_I32 || ix->dtype == KILN_I64, KILN_ERR_TYPE,
                  "indices must be int32 or int64, not %s", kiln_dtype_name(ix->dtype));
    KILN_OP_CHECK(c, x->ndim >= 1, KILN_ERR_SHAPE, "data must have rank >= 1");
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    KILN_OP_CHECK(c, kiln_norm_axis(&axis, x->ndim), KILN_ERR_SHAPE,
                  "axis %" PRId64 " is out of range for rank %d", kiln_attr_int(c->node, "axis", 0),
                  x->ndim);
    int r = x->ndim - 1 + ix->ndim;
    KILN_OP_CHECK(c, r <= KILN_MAX_DIMS, KILN_ERR_UNSUPPORTED,
                  "the output would have rank %d; kiln supports at most %d", r, KILN_MAX_DIMS);
    int64_t dims[KILN_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < axis; d++) dims[n++] = x->dims[d];
    for (int d = 0; d < ix->ndim; d++) dims[n++] = ix->dims[d];
    for (int d = (int)axis + 1; d < x->ndim; d++) dims[n++] = x->dims[d];
    kiln_tensor_set_shape(c->out[0], x->dtype, r, dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1];
    kiln_tensor *y = c->out[0];
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    kiln_norm_axis(&axis, x->ndim);
    int64_t dim = x->dims[axis], n = kiln_tensor_numel(ix);
    const int64_t *i64 = ix->dtype == KILN_I64 ? ix->data : NULL;
    const int32_t *i32 = ix->dtype == KILN_I32 ? ix->data : NULL;
    for (int64_t k = 0; k < n; k++) {
        int64_t i = i64 ? i64[k] : i32[k];
        KILN_OP_CHECK(c, i >= -dim && i < dim, KILN_ERR_INVALID_ARGUMENT,
                      "indices[%" PRId64 "] = %" PRId64 " is out of range [-%" PRId64
                      ", %" PRId64 ") of axis %" PRId64,
                      k, i, dim, dim, axis);
    }
    /* x viewed as (outer, dim, inner), y as (outer, n, inner) */
    size_t es = kiln_dtype_size(x->dtype);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = (int)axis + 1; d < x->ndim; d++) inner *= x->dims[d];
    size_t block = (size_t)inner * es;
    if (block == 0 || n == 0) return KILN_OK;
#pragma omp parallel for if (outer * n * inner > (1 << 16))
    for (int64_t o = 0; o < outer; o++) {
        const char *src = (const char *)x->data + (size_t)(o * dim) * block;
        char *dst = (char *)y->data + (size_t)(o * n) * block;
        for (int64_t k = 0; k < n; k++) {
            int64_t i = i64 ? i64[k] : i32[k];
            if (i < 0) i += dim;
            memcpy(dst + (size_t)k * block, src + (size_t)i * block, block);
        }
    }
    return KILN_OK;
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y;
    const double v[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    /* expected values from numpy.take(np.arange(12).reshape(3, 4), indices, axis) */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), v);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(0, 2, -1, 0));
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 4),
                KT_VALS(0, 1, 2, 3, 8, 9, 10, 11, 8, 9, 10, 11, 0, 1, 2, 3));
    fails += kiln_optest("Gather", "", 2, in, 1, &y, 0, 0, "gather axis 0, 2-D indices");

    in[0] = kt_make(KILN_U16, 2, KT_DIMS(3, 4), v);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(3, -4, 1));
    y = kt_make(KILN_U16, 2, KT_DIMS(3, 3), KT_VALS(3, 0, 1, 7, 4, 5, 11, 8, 9));
    fails += kiln_optest("Gather", "axis=1", 2, in, 1, &y, 0, 0, "gather axis 1, int32 indices");

    in[0] = kt_make(KILN_F64, 2, KT_DIMS(3, 4), v);
    in[1] = kt_scalar(KILN_I64, 2);
    y = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(2, 6, 10));
    fails += kiln_optest("Gather", "axis=-1", 2, in, 1, &y, 0, 0, "gather scalar index");

    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 0, 1));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(0), NULL);
    y = kt_make(KILN_BOOL, 1, KT_DIMS(0), NULL);
    fails += kiln_optest("Gather", "", 2, in, 1, &y, 0, 0, "gather no indices");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 3));
    fails += kiln_optest_fails("Gather", "", 2, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "gather index 3 of 3");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(-5));
    fails += kiln_optest_fails("Gather", "axis=1", 2, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "gather index -5 of 4");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), v);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(1), KT_VALS(0));
    fails += kiln_optest_fails("Gather", "", 2, in, 1, KILN_ERR_TYPE, "gather float indices");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0));
    fails += kiln_optest_fails("Gather", "axis=2", 2, in, 1, KILN_ERR_SHAPE, "gather axis 2");
    return fails;
}

const kiln_op_def kiln_op_gather = {
    .name = "Gather", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = test,
};
