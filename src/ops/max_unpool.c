/* max_unpool.c — MaxUnpool(X, I, output_shape?): the inverse of MaxPool with its Indices
 * output (opsets 9, 11, 22): a zero tensor with X's values written at the flat positions I
 * gives, counted (as MaxPool computes them, over the whole tensor) in the unpooled shape:
 * per spatial dim (in - 1) * stride - pad_begin - pad_end + kernel with kernel_shape
 * (required), strides (default 1) and pads (default 0). The output has that shape, or
 * output_shape (an int64 1-D input, read when the plan is built) when given: the
 * unpooled result then sits at its start, zeros around it (as ONNX's reference). Float dtypes; I
 * int64 of X's shape; an index outside the output is an error at run time
 * (KILN_ERR_INVALID_ARGUMENT). Where two indices coincide the later value wins (on CUDA:
 * one of them). */
#include "../core/optest.h"
#include "max_unpool.h"

#include <inttypes.h>
#include <string.h>

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE, "X dtype %s is not a float type",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, ix->dtype == KILN_I64, KILN_ERR_TYPE, "I must be int64, got %s", kiln_dtype_name(ix->dtype));
    KILN_OP_CHECK(c, x->ndim >= 3, KILN_ERR_SHAPE, "X must be (N, C, d1, ...), got rank %d", x->ndim);
    bool same = ix->ndim == x->ndim;
    for (int d = 0; same && d < x->ndim; d++) same = ix->dims[d] == x->dims[d];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "I must have X's shape");
    const int sp = x->ndim - 2;
    int nk = 0, ns = 0, np = 0;
    const int64_t *k = kiln_attr_ints(c->node, "kernel_shape", &nk);
    const int64_t *s = kiln_attr_ints(c->node, "strides", &ns);
    const int64_t *p = kiln_attr_ints(c->node, "pads", &np);
    KILN_OP_CHECK(c, k && nk == sp, KILN_ERR_INVALID_ARGUMENT, "kernel_shape must have %d values", sp);
    KILN_OP_CHECK(c, !s || ns == sp, KILN_ERR_INVALID_ARGUMENT, "strides must have %d values", sp);
    KILN_OP_CHECK(c, !p || np == 2 * sp, KILN_ERR_INVALID_ARGUMENT, "pads must have %d values", 2 * sp);
    int64_t dims[KILN_MAX_DIMS];
    const kiln_tensor *os = c->n_in > 2 ? c->in[2] : NULL;
    if (os) {
        KILN_OP_CHECK(c, os->dtype == KILN_I64 && os->ndim == 1 && os->dims[0] == x->ndim, KILN_ERR_SHAPE,
                      "output_shape must be int64 of %d values", x->ndim);
        KILN_OP_CHECK(c, os->data != NULL, KILN_ERR_UNSUPPORTED, "output_shape must be known when the plan is built");
        for (int d = 0; d < x->ndim; d++) dims[d] = ((const int64_t *)os->data)[d];
        KILN_OP_CHECK(c, dims[0] == x->dims[0] && dims[1] == x->dims[1], KILN_ERR_SHAPE,
                      "output_shape must keep X's N and C");
    } else {
        dims[0] = x->dims[0];
        dims[1] = x->dims[1];
        for (int d = 0; d < sp; d++)
            dims[2 + d] = (x->dims[2 + d] - 1) * (s ? s[d] : 1) - (p ? p[d] + p[sp + d] : 0) + k[d];
    }
    for (int d = 0; d < x->ndim; d++)
        KILN_OP_CHECK(c, dims[d] >= 0 && dims[d] < ((int64_t)1 << 40), KILN_ERR_SHAPE,
                      "output dim %d would be %" PRId64, d, dims[d]);
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, dims);
    return KILN_OK;
}

/* The unpooled shape from the attributes (what MaxPool's indices count in). */
static void default_dims(const kiln_op_ctx *c, int64_t *dims) {
    const kiln_tensor *x = c->in[0];
    const int sp = x->ndim - 2;
    int nk = 0, ns = 0, np = 0;
    const int64_t *k = kiln_attr_ints(c->node, "kernel_shape", &nk);
    const int64_t *s = kiln_attr_ints(c->node, "strides", &ns);
    const int64_t *p = kiln_attr_ints(c->node, "pads", &np);
    dims[0] = x->dims[0];
    dims[1] = x->dims[1];
    for (int d = 0; d < sp; d++) dims[2 + d] = (x->dims[2 + d] - 1) * (s ? s[d] : 1) - (p ? p[d] + p[sp + d] : 0) + k[d];
}

/* The output offset of index v (a flat position in the unpooled shape def), or -1 when it
 * falls outside that shape or the output's. */
int64_t kiln_unpool_offset(int ndim, const int64_t *def, const int64_t *out, int64_t v) {
    int64_t off = 0, stride = 1, total = 1;
    for (int d = 0; d < ndim; d++) total *= def[d];
    if (v < 0 || v >= total) return -1;
    for (int d = ndim - 1; d >= 0; d--) {
        const int64_t coord = v % def[d];
        v /= def[d];
        if (coord >= out[d]) return -1;
        off += coord * stride;
        stride *= out[d];
    }
    return off;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1];
    kiln_tensor *y = c->out[0];
    const int64_t n = kiln_tensor_numel(x);
    const int64_t *iv = ix->data;
    int64_t def[KILN_MAX_DIMS];
    default_dims(c, def);
    for (int64_t i = 0; i < n; i++)
        KILN_OP_CHECK(c, kiln_unpool_offset(x->ndim, def, y->dims, iv[i]) >= 0, KILN_ERR_INVALID_ARGUMENT,
                      "I[%" PRId64 "] = %" PRId64 " is outside the unpooled tensor or the output", i, iv[i]);
    memset(y->data, 0, kiln_tensor_nbytes(y));
    const size_t es = kiln_dtype_size(x->dtype);
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)y->data + (size_t)kiln_unpool_offset(x->ndim, def, y->dims, iv[i]) * es,
               (const char *)x->data + (size_t)i * es, es);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *y;
    /* the ONNX spec's example: 2x2 pooled values back into 4x4 */
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_I64, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(5, 7, 13, 15));
    y = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 4, 4), KT_VALS(0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4));
    fails += kiln_optest("MaxUnpool", "kernel_shape=[2,2];strides=[2,2]", 2, in, 1, &y, 0, 0, "max_unpool 2x2");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(5, 6, 7, 8));
    in[1] = kt_make(KILN_I64, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(5, 7, 13, 15));
    in[2] = kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 5, 5));
    y = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 5, 5),
                KT_VALS(0, 0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 0, 0, 7, 0, 8, 0, 0, 0, 0, 0, 0));
    fails += kiln_optest("MaxUnpool", "kernel_shape=[2,2];strides=[2,2]", 3, in, 1, &y, 0, 0,
                         "max_unpool with output_shape (the spec's example: the 4x4 result at the start)");
    in[0] = kt_make(KILN_F64, 3, KT_DIMS(1, 2, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_I64, 3, KT_DIMS(1, 2, 2), KT_VALS(0, 3, 4, 5));
    y = kt_make(KILN_F64, 3, KT_DIMS(1, 2, 3), KT_VALS(1, 0, 0, 2, 3, 4));
    fails += kiln_optest("MaxUnpool", "kernel_shape=[2];strides=[1]", 2, in, 1, &y, 0, 0,
                         "max_unpool 1-D, an index past its channel");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_I64, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(0, 1, 2, 16));
    fails += kiln_optest_fails("MaxUnpool", "kernel_shape=[2,2];strides=[2,2]", 2, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "max_unpool index outside the output");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_I64, 4, KT_DIMS(1, 1, 2, 2), KT_VALS(0, 1, 2, 15));
    in[2] = kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 1, 3, 3));
    fails += kiln_optest_fails("MaxUnpool", "kernel_shape=[2,2];strides=[2,2]", 3, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "max_unpool index outside a smaller output_shape");
    in[0] = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL);
    in[1] = kt_make(KILN_I64, 4, KT_DIMS(1, 1, 2, 2), NULL);
    fails += kiln_optest_fails("MaxUnpool", "strides=[2,2]", 2, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "max_unpool needs kernel_shape");
    {
        /* distinct indices (7 i mod 1080, 7 prime to 1080): where indices repeat, the CUDA
         * kernel leaves which value lands unspecified */
        kiln_tensor *ix = kt_make(KILN_I64, 4, KT_DIMS(2, 3, 5, 4), NULL);
        for (int64_t i = 0; i < 120; i++) ((int64_t *)ix->data)[i] = (i * 7) % 1080;
        fails += kiln_optest_sweep("MaxUnpool", "kernel_shape=[3,3];strides=[3,3]", 0, 2,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 4), -3, 3, 7201), ix}, 1,
                                   "max_unpool scattered indices");
    }
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_max_unpool = {
    .precision = KILN_PREC_FOLLOW,
    .name = "MaxUnpool", .min_inputs = 2, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = 1u << 2, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};
