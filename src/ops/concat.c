/* concat.c — Concat: joins its inputs along `axis` (required; negative from opset 11).
 * Every input has the same dtype and rank and the same dims except on axis; inputs with
 * a zero-size axis are allowed. Any dtype (opsets 11..21).
 *
 * Gradient: kiln.ConcatGrad(dY, X0, ..., Xn-1) -> (dX0, ..., dXn-1) cuts dY along axis
 * into blocks shaped like the Xi, reading only the Xi's shapes. Any dtype. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Validate inputs first..c->n_in-1 (the concatenated tensors) and give the output's dims
 * and the normalized axis. */
static kiln_status concat_shape(kiln_op_ctx *c, int first, int64_t *dims, int64_t *axis_out) {
    const kiln_tensor *x0 = c->in[first];
    KILN_OP_CHECK(c, x0 != NULL, KILN_ERR_SHAPE, "input %d is missing", first);
    KILN_OP_CHECK(c, kiln_dtype_size(x0->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x0->dtype));
    KILN_OP_CHECK(c, kiln_node_attr(c->node, "axis") != NULL, KILN_ERR_SHAPE,
                  "attribute axis is required");
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    KILN_OP_CHECK(c, x0->ndim > 0, KILN_ERR_SHAPE, "cannot concatenate scalars");
    KILN_OP_CHECK(c, kiln_norm_axis(&axis, x0->ndim), KILN_ERR_SHAPE,
                  "axis %" PRId64 " is out of range for rank %d",
                  kiln_attr_int(c->node, "axis", 0), x0->ndim);
    memcpy(dims, x0->dims, sizeof x0->dims);
    dims[axis] = 0;
    for (int i = first; i < c->n_in; i++) {
        const kiln_tensor *x = c->in[i];
        KILN_OP_CHECK(c, x != NULL, KILN_ERR_SHAPE, "input %d is missing", i);
        KILN_OP_CHECK(c, x->dtype == x0->dtype, KILN_ERR_TYPE,
                      "input %d has dtype %s, input %d has %s", i, kiln_dtype_name(x->dtype),
                      first, kiln_dtype_name(x0->dtype));
        KILN_OP_CHECK(c, x->ndim == x0->ndim, KILN_ERR_SHAPE,
                      "input %d has rank %d, input %d has rank %d", i, x->ndim, first, x0->ndim);
        for (int d = 0; d < x0->ndim; d++)
            KILN_OP_CHECK(c, d == axis || x->dims[d] == x0->dims[d], KILN_ERR_SHAPE,
                          "input %d has dim %d = %" PRId64 " but input %d has %" PRId64
                          " (only axis %" PRId64 " may differ)",
                          i, d, x->dims[d], first, x0->dims[d], axis);
        dims[axis] += x->dims[axis];
    }
    *axis_out = axis;
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    int64_t dims[KILN_MAX_DIMS], axis;
    kiln_status st = concat_shape(c, 0, dims, &axis);
    if (st != KILN_OK) return st;
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, c->in[0]->ndim, dims);
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

/* ---------------------------------------------------------------- gradient */

/* One ConcatGrad node gives every input's gradient; a single input's is dY itself. */
static kiln_status grad(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    int nx = n->n_in;
    if (nx == 1) {
        g->dx[0] = g->dy[0];
        return KILN_OK;
    }
    int *in = kiln_calloc(g->m->ctx, (size_t)(2 * nx + 1), sizeof *in, "Concat's gradient"), *outs = in + nx + 1;
    if (!in) return KILN_ERR_OUT_OF_MEMORY;
    in[0] = g->dy[0];
    for (int k = 0; k < nx; k++) in[1 + k] = n->in[k];
    kiln_status st = kiln_grad_emit(g, "kiln", "ConcatGrad", nx + 1, in, nx, outs, true, NULL) < 0 ? KILN_ERR_OUT_OF_MEMORY
                                                                                                    : KILN_OK;
    for (int k = 0; k < nx && !st; k++)
        if (g->need[k]) g->dx[k] = outs[k];
    free(in);
    return st;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0];
    KILN_OP_CHECK(c, c->n_in >= 2 && c->n_out == c->n_in - 1, KILN_ERR_SHAPE,
                  "%d outputs for %d inputs X: one output per X", c->n_out, c->n_in - 1);
    int64_t dims[KILN_MAX_DIMS], axis;
    kiln_status st = concat_shape(c, 1, dims, &axis);
    if (st != KILN_OK) return st;
    const kiln_tensor *x0 = c->in[1];
    KILN_OP_CHECK(c, dy->dtype == x0->dtype, KILN_ERR_TYPE, "dY has dtype %s, X has %s",
                  kiln_dtype_name(dy->dtype), kiln_dtype_name(x0->dtype));
    bool same = dy->ndim == x0->ndim;
    for (int d = 0; same && d < dy->ndim; d++) same = dy->dims[d] == dims[d];
    char want[160];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY must have the concatenation's shape %s",
                  kiln_dims_str(x0->ndim, dims, want, sizeof want));
    for (int k = 0; k < c->n_out; k++)
        kiln_tensor_set_shape(c->out[k], dy->dtype, c->in[1 + k]->ndim, c->in[1 + k]->dims);
    return KILN_OK;
}

static kiln_status forward_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0];
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    kiln_norm_axis(&axis, dy->ndim);
    size_t es = kiln_dtype_size(dy->dtype);
    /* dY viewed as (outer, dims[axis] * inner); output k takes a block of each row */
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= dy->dims[d];
    for (int d = (int)axis + 1; d < dy->ndim; d++) inner *= dy->dims[d];
    size_t row = (size_t)(dy->dims[axis] * inner) * es;
    size_t at = 0;
    for (int k = 0; k < c->n_out; k++) {
        kiln_tensor *dx = c->out[k];
        size_t block = (size_t)(dx->dims[axis] * inner) * es;
        if (block == 0) continue;
        const char *src = (const char *)dy->data + at;
        char *dst = dx->data;
        for (int64_t o = 0; o < outer; o++) memcpy(dst + o * block, src + o * row, block);
        at += block;
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test_grad(void) {
    int fails = 0;
    {
        /* 14 parts: two launches of the NHWC kernel (12 parts each) in the backend sweep */
        kiln_tensor *in[15];
        in[0] = kt_rand(KILN_F32, 4, KT_DIMS(2, 27, 3, 5), -1, 1, 7420); /* 27 = sum of 1 + k % 3 */
        for (int k = 0; k < 14; k++) in[1 + k] = kt_make(KILN_F32, 4, KT_DIMS(2, 1 + k % 3, 3, 5), NULL);
        fails += kiln_optest_sweep("ConcatGrad", "axis=1", 0, 15, in, 14, "concat grad 4-D 14 parts");
    }
    fails += kiln_optest_sweep("ConcatGrad", "axis=1", 0, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 9, 3, 4), -1, 1, 951),
                                                 kt_make(KILN_F32, 4, KT_DIMS(2, 2, 3, 4), NULL),
                                                 kt_make(KILN_F32, 4, KT_DIMS(2, 4, 3, 4), NULL),
                                                 kt_make(KILN_F32, 4, KT_DIMS(2, 3, 3, 4), NULL)},
                               3, "concat grad random 4-D");
    kiln_tensor *in[4], *want[3];
    const double v[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    /* dY = arange(12).reshape(2, 6) cut at columns 3 and 5 */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 6), v);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[3] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), NULL);
    want[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 1, 2, 6, 7, 8));
    want[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(3, 4, 9, 10));
    want[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(5, 11));
    fails += kiln_optest("ConcatGrad", "axis=-1", 4, in, 3, want, 0, 0, "concat grad axis -1");

    /* dY = arange(12).reshape(3, 2, 2) cut along axis 0 into 0, 1 and 2 rows */
    in[0] = kt_make(KILN_F64, 3, KT_DIMS(3, 2, 2), v);
    in[1] = kt_make(KILN_F64, 3, KT_DIMS(0, 2, 2), NULL);
    in[2] = kt_make(KILN_F64, 3, KT_DIMS(1, 2, 2), NULL);
    in[3] = kt_make(KILN_F64, 3, KT_DIMS(2, 2, 2), NULL);
    want[0] = kt_make(KILN_F64, 3, KT_DIMS(0, 2, 2), NULL);
    want[1] = kt_make(KILN_F64, 3, KT_DIMS(1, 2, 2), KT_VALS(0, 1, 2, 3));
    want[2] = kt_make(KILN_F64, 3, KT_DIMS(2, 2, 2), KT_VALS(4, 5, 6, 7, 8, 9, 10, 11));
    fails += kiln_optest("ConcatGrad", "axis=0", 4, in, 3, want, 0, 0,
                         "concat grad axis 0, an empty part");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 5), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("ConcatGrad", "axis=1", 3, in, 2, KILN_ERR_SHAPE,
                               "concat grad dY of the wrong shape");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 6), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    fails += kiln_optest_fails("ConcatGrad", "axis=1", 3, in, 3, KILN_ERR_SHAPE,
                               "concat grad output count");
    return fails;
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

    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 1);
    in[1] = kt_rand(KILN_F64, 2, KT_DIMS(2, 2), -1, 1, 2);
    in[2] = kt_rand(KILN_F64, 2, KT_DIMS(2, 1), -1, 1, 3);
    fails += kiln_gradcheck("Concat", "axis=1", 0, 3, in, NULL, "concat grad axis 1");
    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(1, 2, 3), -1, 1, 4);
    in[1] = kt_rand(KILN_F64, 3, KT_DIMS(2, 2, 3), -1, 1, 5);
    in[2] = kt_rand(KILN_F64, 3, KT_DIMS(3, 2, 3), -1, 1, 6);
    fails += kiln_gradcheck("Concat", "axis=-3", 0, 3, in, (const bool[]){true, false, true},
                            "concat grad axis -3, a constant input");
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 7);
    fails += kiln_gradcheck("Concat", "axis=0", 0, 1, in, NULL, "concat grad one input");
    /* a DenseNet block's Concat: more inputs than 16 and than the 32 bits of an op's input
     * masks (ConcatGrad's shape-only inputs) */
    kiln_tensor *many[34];
    for (int k = 0; k < 34; k++) many[k] = kt_rand(KILN_F64, 2, KT_DIMS(2, 1 + k % 3), -1, 1, 100 + k);
    fails += kiln_gradcheck("Concat", "axis=1", 0, 34, many, NULL, "concat grad of 34 inputs");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Concat", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 321),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 17, 19), -2, 2, 322)},
                               1, "concat random channels 3 + 5");
    /* for the NHWC kernel in the sweep: channel blocks of 16 bytes (f32 4 + 8 + 4), a
     * one-channel part (the same bytes in both layouts), 6 parts of 2 f16-sized channels
     * (the sweep lays out at most 6 inputs NHWC), and the height axis (2-D copies over the
     * physical dims) */
    fails += kiln_optest_sweep("Concat", "axis=1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 5, 7), -2, 2, 7401),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 8, 5, 7), -2, 2, 7402),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 5, 7), -2, 2, 7403)},
                               1, "concat 4-D channels 4 + 8 + 4");
    fails += kiln_optest_sweep("Concat", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 7404),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 1, 4, 5), -2, 2, 7405)},
                               1, "concat 4-D channels 3 + 1");
    {
        kiln_tensor *parts[6];
        for (int k = 0; k < 6; k++) parts[k] = kt_rand(KILN_F32, 4, KT_DIMS(2, 2, 3, 3), -2, 2, 7410 + (uint64_t)k);
        fails += kiln_optest_sweep("Concat", "axis=1", 0, 6, parts, 1, "concat 4-D 6 parts of 2 channels");
    }
    fails += kiln_optest_sweep("Concat", "axis=2", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 7406),
                                                kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 2, 5), -2, 2, 7407)},
                               1, "concat 4-D height 4 + 2");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Concat", "axis=1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 4), -2, 2, 1312),
                                                kt_rand(KILN_F32, 3, KT_DIMS(2, 5, 4), -2, 2, 1313),
                                                kt_rand(KILN_F32, 3, KT_DIMS(2, 1, 4), -2, 2, 1314)},
                               1, "concat axis 1 f32");
    fails += kiln_optest_sweep("Concat", "axis=1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(2, 3, 4), -2, 2, 1315),
                                                kt_rand(KILN_I64, 3, KT_DIMS(2, 5, 4), -2, 2, 1316),
                                                kt_rand(KILN_I64, 3, KT_DIMS(2, 1, 4), -2, 2, 1317)},
                               1, "concat axis 1 i64");
    fails += kiln_optest_sweep("Concat", "axis=1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(2, 3, 4), -2, 2, 1318),
                                                kt_rand(KILN_U8, 3, KT_DIMS(2, 5, 4), -2, 2, 1319),
                                                kt_rand(KILN_U8, 3, KT_DIMS(2, 1, 4), -2, 2, 1320)},
                               1, "concat axis 1 u8");
    fails += kiln_optest_sweep("Concat", "axis=0", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(2, 3), -2, 2, 1321),
                                                kt_rand(KILN_F32, 2, KT_DIMS(1, 3), -2, 2, 1322)},
                               1, "concat axis 0 f32");
    fails += kiln_optest_sweep("Concat", "axis=0", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(2, 3), -2, 2, 1323),
                                                kt_rand(KILN_I64, 2, KT_DIMS(1, 3), -2, 2, 1324)},
                               1, "concat axis 0 i64");
    fails += kiln_optest_sweep("Concat", "axis=0", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(2, 3), -2, 2, 1325),
                                                kt_rand(KILN_U8, 2, KT_DIMS(1, 3), -2, 2, 1326)},
                               1, "concat axis 0 u8");
    fails += kiln_optest_sweep("Concat", "axis=-1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 1), -2, 2, 1327),
                                                kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 0), -2, 2, 1328),
                                                kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 5), -2, 2, 1329)},
                               1, "concat last axis, an empty input f32");
    fails += kiln_optest_sweep("Concat", "axis=-1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(2, 3, 1), -2, 2, 1330),
                                                kt_rand(KILN_I64, 3, KT_DIMS(2, 3, 0), -2, 2, 1331),
                                                kt_rand(KILN_I64, 3, KT_DIMS(2, 3, 5), -2, 2, 1332)},
                               1, "concat last axis, an empty input i64");
    fails += kiln_optest_sweep("Concat", "axis=-1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(2, 3, 1), -2, 2, 1333),
                                                kt_rand(KILN_U8, 3, KT_DIMS(2, 3, 0), -2, 2, 1334),
                                                kt_rand(KILN_U8, 3, KT_DIMS(2, 3, 5), -2, 2, 1335)},
                               1, "concat last axis, an empty input u8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_concat = {
    .precision = KILN_PREC_FOLLOW, .layout = KILN_LAYOUT_JOIN,
    .name = "Concat", .min_inputs = 1, .max_inputs = -1, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};

const kiln_op_def kiln_op_concat_grad = {
    /* it moves data: in the gradient's dtype (an fp32 class put two Casts around it in
     * mixed-precision training, which broke the NHWC chain between the convolutions) */
    .precision = KILN_PREC_FOLLOW, .layout = KILN_LAYOUT_PARTS,
    .name = "ConcatGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = -1,
    .min_outputs = 1, .max_outputs = -1, .shape_only_inputs = ~1u, .infer = infer_grad,
    .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};
