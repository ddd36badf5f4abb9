/* gather_nd.c — GatherND(data, indices): indices' last dim m picks an element (m == r - b)
 * or a slice of data (dims b+m.. onward), for every position of indices' other dims.
 * batch_dims b (opset 12+, default 0): the first b dims of data and indices are a batch
 * both share. Output dims: indices.dims[:-1] + data.dims[b+m:]. Opsets 11, 12, 13. int64
 * indices (int32 accepted); negative ones count from the end; one out of range is an
 * error at run time (KILN_ERR_INVALID_ARGUMENT), checked before anything is written. Any
 * data dtype. */
#include "../core/optest.h"

#include <inttypes.h>
#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "data dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, ix->dtype == KILN_I64 || ix->dtype == KILN_I32, KILN_ERR_TYPE,
                  "indices must be int64 (or int32), got %s", kiln_dtype_name(ix->dtype));
    const int64_t b = kiln_attr_int(c->node, "batch_dims", 0);
    KILN_OP_CHECK(c, x->ndim >= 1 && ix->ndim >= 1, KILN_ERR_SHAPE, "data and indices must have rank >= 1");
    KILN_OP_CHECK(c, b >= 0 && b < x->ndim && b < ix->ndim, KILN_ERR_INVALID_ARGUMENT,
                  "batch_dims=%" PRId64 " must be below both ranks (%d, %d)", b, x->ndim, ix->ndim);
    for (int d = 0; d < b; d++)
        KILN_OP_CHECK(c, x->dims[d] == ix->dims[d], KILN_ERR_SHAPE,
                      "batch dim %d: data has %" PRId64 ", indices %" PRId64, d, x->dims[d], ix->dims[d]);
    const int64_t m = ix->dims[ix->ndim - 1];
    KILN_OP_CHECK(c, m >= 1 && m <= x->ndim - b, KILN_ERR_SHAPE,
                  "indices' last dim %" PRId64 " must be in [1, %" PRId64 "] (data rank - batch_dims)", m,
                  x->ndim - b);
    int64_t dims[KILN_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < ix->ndim - 1; d++) dims[nd++] = ix->dims[d];
    for (int d = (int)(b + m); d < x->ndim; d++) {
        KILN_OP_CHECK(c, nd < KILN_MAX_DIMS, KILN_ERR_SHAPE, "output rank above %d", KILN_MAX_DIMS);
        dims[nd++] = x->dims[d];
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, nd, dims);
    return KILN_OK;
}

/* For gather (y = data[...]) and ScatterND (data[...] = updates): the slice offset in data
 * of index tuple t (t over indices.dims[:-1]), or -1 with *bad set to the element index. */
static int64_t tuple_offset(const kiln_tensor *x, const kiln_tensor *ix, int64_t b, int64_t t, int64_t per_batch,
                            const int64_t *xs, int64_t *bad) {
    const int64_t m = ix->dims[ix->ndim - 1];
    int64_t off = 0;
    if (b > 0) {
        /* the batch of t: its first b coordinates, at data's strides */
        int64_t batch = t / per_batch;
        for (int d = (int)b - 1; d >= 0; d--) {
            off += (batch % x->dims[d]) * xs[d];
            batch /= x->dims[d];
        }
    }
    for (int64_t k = 0; k < m; k++) {
        int64_t v = kiln_get_i64(ix, t * m + k);
        const int64_t dim = x->dims[b + k];
        if (v < -dim || v >= dim) {
            *bad = t * m + k;
            return -1;
        }
        if (v < 0) v += dim;
        off += v * xs[b + k];
    }
    return off;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1];
    kiln_tensor *y = c->out[0];
    const int64_t b = kiln_attr_int(c->node, "batch_dims", 0), m = ix->dims[ix->ndim - 1];
    const int64_t tuples = m ? kiln_tensor_numel(ix) / m : 0;
    int64_t xs[KILN_MAX_DIMS], per_batch = 1;
    kiln_strides(x->ndim, x->dims, xs);
    for (int d = (int)b; d < ix->ndim - 1; d++) per_batch *= ix->dims[d];
    const int64_t slice = (b + m < x->ndim) ? xs[b + m - 1] : 1; /* elements per slice */
    const size_t es = kiln_dtype_size(x->dtype);
    for (int64_t t = 0; t < tuples; t++) {
        int64_t bad = -1;
        if (tuple_offset(x, ix, b, t, per_batch, xs, &bad) < 0)
            return kiln_op_fail(c, KILN_ERR_INVALID_ARGUMENT, "indices[%" PRId64 "] = %" PRId64 " is out of range",
                                bad, kiln_get_i64(ix, bad));
    }
    for (int64_t t = 0; t < tuples; t++) {
        int64_t bad;
        const int64_t off = tuple_offset(x, ix, b, t, per_batch, xs, &bad);
        memcpy((char *)y->data + (size_t)(t * slice) * es, (const char *)x->data + (size_t)off * es,
               (size_t)slice * es);
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y;
    /* the ONNX spec's examples */
    in[0] = kt_make(KILN_I32, 2, KT_DIMS(2, 2), KT_VALS(0, 1, 2, 3));
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(0, 0, 1, 1));
    y = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, 3));
    fails += kiln_optest("GatherND", "", 2, in, 1, &y, 0, 0, "gather_nd elements");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(0, 1, 2, 3));
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(1, 0));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(2, 3, 0, 1));
    fails += kiln_optest("GatherND", "", 2, in, 1, &y, 0, 0, "gather_nd slices");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2), KT_VALS(0, 1, 2, 3, 4, 5, 6, 7));
    in[1] = kt_make(KILN_I64, 3, KT_DIMS(2, 1, 2), KT_VALS(0, 1, 1, 0));
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 2), KT_VALS(2, 3, 4, 5));
    fails += kiln_optest("GatherND", "", 2, in, 1, &y, 0, 0, "gather_nd 3-D slices");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2), KT_VALS(0, 1, 2, 3, 4, 5, 6, 7));
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(1, 0));
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(2, 3, 4, 5));
    fails += kiln_optest("GatherND", "batch_dims=1", 2, in, 1, &y, 0, 0, "gather_nd batch_dims 1");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 1, 2, 3, 4, 5));
    in[1] = kt_make(KILN_I32, 2, KT_DIMS(2, 2), KT_VALS(-1, -1, 0, -3));
    y = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(5, 0));
    fails += kiln_optest("GatherND", "", 2, in, 1, &y, 0, 0, "gather_nd negative indices");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 2), KT_VALS(0, 3));
    fails += kiln_optest_fails("GatherND", "", 2, in, 1, KILN_ERR_INVALID_ARGUMENT, "gather_nd index out of range");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 3), NULL);
    fails += kiln_optest_fails("GatherND", "", 2, in, 1, KILN_ERR_SHAPE, "gather_nd last dim above rank");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(3, 1), NULL);
    fails += kiln_optest_fails("GatherND", "batch_dims=1", 2, in, 1, KILN_ERR_SHAPE, "gather_nd batch mismatch");
    fails += kiln_optest_sweep("GatherND", "batch_dims=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 5, 6, 7), -3, 3, 6301),
                                                 kt_rand(KILN_I64, 3, KT_DIMS(3, 4, 2), 0, 5, 6302)},
                               1, "gather_nd random batch_dims 1");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_gather_nd = {
    .precision = KILN_PREC_FOLLOW,
    .name = "GatherND", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
