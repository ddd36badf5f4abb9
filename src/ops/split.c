/* split.c — Split: cuts input along `axis` (default 0, may be negative) into one part per
 * output (opsets 11..21). Part sizes come from the `split` attribute before opset 13, from
 * the optional int32/int64 input 1 from opset 13, or, when neither is given, are equal
 * (the dim must divide evenly). From opset 18 the `num_outputs` attribute asks for
 * ceil(dim / num_outputs) per part with a smaller last part. Zero-size parts are allowed.
 * Any dtype.
 *
 * Gradient: Concat of the dY_k when every output reaches the loss; otherwise
 * kiln.SplitGrad(X, split, dY_0, ..., dY_n-1) (attributes and opset of the Split) writes
 * each present dY_k into its part of dX and zeros where dY_k is missing. Only X's shape
 * is read. Any dtype. */
#include "../core/optest.h"
#include "movement.h"

#include <stdio.h>

#include <inttypes.h>
#include <string.h>

/* Where the part sizes come from. */
typedef struct split_spec {
    int64_t axis, dim;
    const kiln_tensor *split_in; /* opset 13+: sizes in input 1 */
    const int64_t *split_attr;   /* before 13: sizes in the attribute */
    int64_t chunk;               /* otherwise: every part has chunk elements, the last
                                    one what remains */
} split_spec;

static int64_t part_size(const split_spec *s, int k, int n) {
    if (s->split_in) return kiln_get_i64(s->split_in, k);
    if (s->split_attr) return s->split_attr[k];
    int64_t left = s->dim - (int64_t)k * s->chunk;
    return k == n - 1 ? left : s->chunk;
}

/* X is input 0 and the optional sizes input 1, for Split and SplitGrad alike; n parts. */
static kiln_status get_spec(kiln_op_ctx *c, int n, split_spec *s) {
    const kiln_tensor *x = c->in[0];
    const kiln_node *node = c->node;
    memset(s, 0, sizeof *s);
    s->axis = kiln_attr_int(node, "axis", 0);
    KILN_OP_CHECK(c, kiln_norm_axis(&s->axis, x->ndim), KILN_ERR_SHAPE,
                  "axis %" PRId64 " is out of range for rank %d", kiln_attr_int(node, "axis", 0),
                  x->ndim);
    s->dim = x->dims[s->axis];
    int count = -1;
    if (node->opset >= 13 && c->n_in > 1 && c->in[1]) {
        const kiln_tensor *t = c->in[1];
        KILN_OP_CHECK(c, t->dtype == KILN_I64 || t->dtype == KILN_I32, KILN_ERR_TYPE,
                      "split must be int32 or int64, not %s", kiln_dtype_name(t->dtype));
        KILN_OP_CHECK(c, t->ndim <= 1, KILN_ERR_SHAPE, "split must be 1-D, not of rank %d",
                      t->ndim);
        KILN_OP_CHECK(c, kiln_tensor_numel(t) == 0 || t->data, KILN_ERR_UNSUPPORTED,
                      "the values of split must be known when the plan is built");
        s->split_in = t;
        count = (int)kiln_tensor_numel(t);
    } else if (node->opset < 13 && kiln_node_attr(node, "split")) {
        s->split_attr = kiln_attr_ints(node, "split", &count);
    }
    if (count >= 0) {
        KILN_OP_CHECK(c, count == n, KILN_ERR_SHAPE, "split has %d sizes for %d outputs", count,
                      n);
        int64_t total = 0;
        for (int k = 0; k < n; k++) {
            int64_t sz = part_size(s, k, n);
            KILN_OP_CHECK(c, sz >= 0, KILN_ERR_SHAPE, "split[%d] = %" PRId64 " is negative", k,
                          sz);
            /* total <= dim so far: no overflow past it */
            KILN_OP_CHECK(c, sz <= s->dim - total, KILN_ERR_SHAPE,
                          "split sizes up to split[%d] = %" PRId64 " add up to more than axis %" PRId64
                          "'s %" PRId64, k, sz, s->axis, s->dim);
            total += sz;
        }
        KILN_OP_CHECK(c, total == s->dim, KILN_ERR_SHAPE,
                      "split sizes add up to %" PRId64 ", but axis %" PRId64 " has %" PRId64,
                      total, s->axis, s->dim);
        return KILN_OK;
    }
    if (node->opset >= 18 && kiln_node_attr(node, "num_outputs")) {
        int64_t num = kiln_attr_int(node, "num_outputs", 0);
        KILN_OP_CHECK(c, num == n, KILN_ERR_SHAPE,
                      "num_outputs is %" PRId64 " but the node has %d outputs", num, n);
        s->chunk = (s->dim + n - 1) / n;
        KILN_OP_CHECK(c, s->dim == 0 || (int64_t)(n - 1) * s->chunk < s->dim, KILN_ERR_SHAPE,
                      "cannot split %" PRId64 " into %d parts of at most %" PRId64, s->dim, n,
                      s->chunk);
        return KILN_OK;
    }
    KILN_OP_CHECK(c, s->dim % n == 0, KILN_ERR_SHAPE,
                  "axis %" PRId64 " of size %" PRId64 " does not split into %d equal parts",
                  s->axis, s->dim, n);
    s->chunk = s->dim / n;
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim > 0, KILN_ERR_SHAPE, "cannot split a scalar");
    split_spec s;
    kiln_status st = get_spec(c, c->n_out, &s);
    if (st != KILN_OK) return st;
    int64_t dims[KILN_MAX_DIMS];
    memcpy(dims, x->dims, sizeof dims);
    for (int k = 0; k < c->n_out; k++) {
        if (!c->out[k]) continue;
        dims[s.axis] = part_size(&s, k, c->n_out);
        kiln_tensor_set_shape(c->out[k], x->dtype, x->ndim, dims);
    }
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    split_spec s;
    kiln_status st = get_spec(c, c->n_out, &s);
    if (st != KILN_OK) return st;
    size_t es = kiln_dtype_size(x->dtype);
    /* x viewed as (outer, dim * inner); part k takes a block of each row */
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < s.axis; d++) outer *= x->dims[d];
    for (int d = (int)s.axis + 1; d < x->ndim; d++) inner *= x->dims[d];
    size_t row = (size_t)(s.dim * inner) * es, at = 0;
    for (int k = 0; k < c->n_out; k++) {
        size_t block = (size_t)(part_size(&s, k, c->n_out) * inner) * es;
        kiln_tensor *y = c->out[k];
        if (y && block > 0) {
            const char *src = (const char *)x->data + at;
            char *dst = y->data;
            for (int64_t o = 0; o < outer; o++) memcpy(dst + o * block, src + o * row, block);
        }
        at += block;
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- gradient */

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_grad_refuse(g, 1, "split");
    if (st != KILN_OK || !g->need[0]) return st;
    const kiln_node *n = KILN_GRAD_NODE(g);
    int parts = n->n_out;
    bool all = true;
    for (int k = 0; k < parts; k++) all = all && g->dy[k] >= 0;
    if (all && parts == 1) {
        g->dx[0] = g->dy[0];
        return KILN_OK;
    }
    if (all) {
        char attrs[48];
        snprintf(attrs, sizeof attrs, "axis=%" PRId64, kiln_attr_int(n, "axis", 0));
        g->dx[0] = kiln_grad_emit(g, NULL, "Concat", parts, g->dy, 1, NULL, false, attrs);
        return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
    }
    if (parts > 16)
        return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                         "Split node '%s': the gradient of more than 16 outputs is not supported",
                         n->name);
    int in[18];
    in[0] = n->in[0];
    in[1] = n->n_in > 1 ? n->in[1] : -1;
    for (int k = 0; k < parts; k++) in[2 + k] = g->dy[k];
    g->dx[0] = kiln_grad_emit(g, "kiln", "SplitGrad", parts + 2, in, 1, NULL, true, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    int n = c->n_in - 2;
    KILN_OP_CHECK(c, n >= 1, KILN_ERR_SHAPE, "SplitGrad takes X, split and at least one dY");
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim > 0, KILN_ERR_SHAPE, "X cannot be a scalar");
    split_spec s;
    kiln_status st = get_spec(c, n, &s);
    if (st != KILN_OK) return st;
    for (int k = 0; k < n; k++) {
        const kiln_tensor *dy = c->in[2 + k];
        if (!dy) continue;
        KILN_OP_CHECK(c, dy->dtype == x->dtype, KILN_ERR_TYPE, "dY_%d has dtype %s, X has %s", k,
                      kiln_dtype_name(dy->dtype), kiln_dtype_name(x->dtype));
        bool same = dy->ndim == x->ndim;
        for (int d = 0; same && d < x->ndim; d++)
            same = dy->dims[d] == (d == s.axis ? part_size(&s, k, n) : x->dims[d]);
        KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY_%d must have the shape of output %d", k, k);
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward_grad(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *dx = c->out[0];
    int n = c->n_in - 2;
    split_spec s;
    kiln_status st = get_spec(c, n, &s);
    if (st != KILN_OK) return st;
    size_t es = kiln_dtype_size(x->dtype);
    /* dX viewed as (outer, dim * inner); part k is a block of each row */
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < s.axis; d++) outer *= x->dims[d];
    for (int d = (int)s.axis + 1; d < x->ndim; d++) inner *= x->dims[d];
    size_t row = (size_t)(s.dim * inner) * es, at = 0;
    for (int k = 0; k < n; k++) {
        size_t block = (size_t)(part_size(&s, k, n) * inner) * es;
        const kiln_tensor *dy = c->in[2 + k];
        char *dst = (char *)dx->data + at;
        if (block > 0)
            for (int64_t o = 0; o < outer; o++) {
                if (dy) memcpy(dst + o * row, (const char *)dy->data + o * block, block);
                else memset(dst + o * row, 0, block);
            }
        at += block;
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test_grad(void) {
    int fails = 0;
    /* random, for the CUDA sweep: parts of 2, 1 and 4 along axis 1, the middle dY absent;
     * equal parts with the last absent */
    fails += kiln_optest_sweep("SplitGrad", "axis=1", 0, 5,
                               (kiln_tensor *[]){kt_make(KILN_F32, 3, KT_DIMS(2, 7, 3), NULL),
                                                 kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 1, 4)),
                                                 kt_rand(KILN_F32, 3, KT_DIMS(2, 2, 3), -1, 1, 901), NULL,
                                                 kt_rand(KILN_F32, 3, KT_DIMS(2, 4, 3), -1, 1, 902)},
                               1, "split grad random, middle dY absent");
    fails += kiln_optest_sweep("SplitGrad", "axis=-1", 0, 4,
                               (kiln_tensor *[]){kt_make(KILN_F32, 4, KT_DIMS(2, 3, 4, 6), NULL), NULL,
                                                 kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 3), -1, 1, 903), NULL},
                               1, "split grad random equal parts, last dY absent");
    kiln_tensor *in[5], *want;
    /* parts of 2, 3 and 1 columns; the middle dY is missing */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 6), NULL);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 3, 1));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4));
    in[3] = NULL;
    in[4] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(5, 6));
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 6), KT_VALS(1, 2, 0, 0, 0, 5, 3, 4, 0, 0, 0, 6));
    fails += kiln_optest("SplitGrad", "axis=1", 5, in, 1, &want, 0, 0,
                         "split grad middle dY missing");

    /* opset 18 num_outputs: 7 -> 3, 3, 1, the first dY missing */
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(7), NULL);
    in[1] = NULL;
    in[2] = NULL;
    in[3] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(1, 2, 3));
    in[4] = kt_make(KILN_F64, 1, KT_DIMS(1), KT_VALS(4));
    want = kt_make(KILN_F64, 1, KT_DIMS(7), KT_VALS(0, 0, 0, 1, 2, 3, 4));
    fails += kiln_optest_opset("SplitGrad", "num_outputs=3", 18, 5, in, 1, &want, 0, 0,
                               "split grad num_outputs, first dY missing");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 6), NULL);
    in[1] = NULL;
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[3] = NULL;
    fails += kiln_optest_fails("SplitGrad", "axis=1", 4, in, 1, KILN_ERR_SHAPE,
                               "split grad dY of the wrong shape");

    /* through autograd: R in the part that reaches the loss sum(Y_k * R), zeros elsewhere
     * (kiln.SplitGrad); every output concatenated back gives R (the Concat path) */
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(2, 6), -1, 1, 1);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 3, 1));
    fails += kiln_grad_route_check(
        "Split", "axis=1", 13, 2, in, 3, 1,
        kt_make(KILN_F64, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6)),
        kt_make(KILN_F64, 2, KT_DIMS(2, 6), KT_VALS(0, 0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0)), false,
        "split grad through autograd, only output 1 used");
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(4, 2), -1, 1, 2);
    fails += kiln_grad_route_check(
        "Split", "", 11, 1, in, 2, 0, kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(-1, 2, -3, 4)),
        kt_make(KILN_F64, 2, KT_DIMS(4, 2), KT_VALS(-1, 2, -3, 4, 0, 0, 0, 0)), false,
        "split grad through autograd, opset 11, only output 0 used");
    kiln_tensor *r = kt_rand(KILN_F64, 3, KT_DIMS(2, 5, 2), -1, 1, 3);
    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(2, 5, 2), -1, 1, 4);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 0, 3));
    fails += kiln_grad_route_check("Split", "axis=-2", 13, 2, in, 3, -1, r,
                                   kiln_tensor_clone(NULL, r), false,
                                   "split grad through autograd, all outputs concatenated back");
    return fails;
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y[3];
    const double v[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    /* expected values from numpy.split(np.arange(12).reshape(2, 6), [2, 5], axis=1) */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 6), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 3, 1));
    y[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(0, 1, 6, 7));
    y[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(2, 3, 4, 8, 9, 10));
    y[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(5, 11));
    fails += kiln_optest("Split", "axis=-1", 2, in, 3, y, 0, 0, "split variable parts");

    in[0] = kt_make(KILN_I8, 2, KT_DIMS(2, 6), v);
    y[0] = kt_make(KILN_I8, 2, KT_DIMS(1, 6), KT_VALS(0, 1, 2, 3, 4, 5));
    y[1] = kt_make(KILN_I8, 2, KT_DIMS(1, 6), KT_VALS(6, 7, 8, 9, 10, 11));
    fails += kiln_optest("Split", "", 1, in, 2, y, 0, 0, "split equal default axis");

    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 6), v);
    y[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(0, 1, 6, 7));
    y[1] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(2, 3, 8, 9));
    y[2] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(4, 5, 10, 11));
    fails += kiln_optest_opset("Split", "axis=1;split=[2,2,2]", 11, 1, in, 3, y, 0, 0,
                               "split opset 11 attribute");

    /* opset 18 num_outputs: 7 -> 3, 3, 1 */
    in[0] = kt_make(KILN_BOOL, 1, KT_DIMS(7), KT_VALS(1, 0, 1, 1, 0, 0, 1));
    y[0] = kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 0, 1));
    y[1] = kt_make(KILN_BOOL, 1, KT_DIMS(3), KT_VALS(1, 0, 0));
    y[2] = kt_make(KILN_BOOL, 1, KT_DIMS(1), KT_VALS(1));
    fails += kiln_optest_opset("Split", "num_outputs=3", 18, 1, in, 3, y, 0, 0,
                               "split num_outputs uneven");

    in[0] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 3));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(0, 3, 0));
    y[0] = kt_make(KILN_F32, 1, KT_DIMS(0), NULL);
    y[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 2, 3));
    y[2] = kt_make(KILN_F32, 1, KT_DIMS(0), NULL);
    fails += kiln_optest("Split", "", 2, in, 3, y, 0, 0, "split zero-size parts");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 6), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 3));
    fails += kiln_optest_fails("Split", "axis=1", 2, in, 2, KILN_ERR_SHAPE, "split sum 5 of 6");
    /* sizes whose sum overflowed int64 and wrapped around to the axis' 6 */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 6), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(9223372036854774784.0, 9223372036854774784.0, 2054));
    fails += kiln_optest_fails("Split", "axis=1", 2, in, 3, KILN_ERR_SHAPE, "split sizes overflowing int64");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 6), v);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 4));
    fails += kiln_optest_fails("Split", "axis=1", 2, in, 3, KILN_ERR_SHAPE,
                               "split 2 sizes for 3 outputs");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 6), v);
    fails += kiln_optest_fails("Split", "axis=1", 1, in, 4, KILN_ERR_SHAPE,
                               "split 6 into 4 equal parts");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 6), v);
    fails += kiln_optest_fails("Split", "axis=2", 1, in, 2, KILN_ERR_SHAPE, "split axis 2");

    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 5);
    fails += kiln_gradcheck_ex("Split", "", 13, 1, in, NULL, 1, 1.0, "split grad one part");
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(2, 6), -1, 1, 1);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 3, 1));
    fails += kiln_gradcheck_ex("Split", "axis=-1", 13, 2, in, NULL, 3, 1.0,
                               "split grad variable parts");
    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(4, 2, 3), -1, 1, 2);
    fails += kiln_gradcheck_ex("Split", "", 13, 1, in, NULL, 2, 1.0,
                               "split grad equal parts axis 0");
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 3);
    fails += kiln_gradcheck_ex("Split", "axis=1;split=[1,3]", 11, 1, in, NULL, 2, 1.0,
                               "split grad opset 11 attribute");
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(2, 7), -1, 1, 4);
    fails += kiln_gradcheck_ex("Split", "axis=1;num_outputs=3", 18, 1, in, NULL, 3, 1.0,
                               "split grad num_outputs uneven");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    /* 4-D, for the NHWC kernels in the sweep: channels (ShuffleNet's halves), and width */
    fails += kiln_optest_sweep("Split", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 12, 5, 3), -2, 2, 7201),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(4, 8))},
                               2, "split 4-D channels 4+8");
    fails += kiln_optest_sweep("Split", "axis=3", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 7), -2, 2, 7202),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 4))},
                               2, "split 4-D width 3+4");
    fails += kiln_optest_sweep("Split", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 9, 17), -2, 2, 431),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 3, 4))},
                               3, "split random 2+3+4");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Split", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 9, 4), -2, 2, 1456),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 3, 4))},
                               3, "split split input f32");
    fails += kiln_optest_sweep("Split", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(2, 9, 4), -2, 2, 1457),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 3, 4))},
                               3, "split split input i64");
    fails += kiln_optest_sweep("Split", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(2, 9, 4), -2, 2, 1458),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(2, 3, 4))},
                               3, "split split input u8");
    fails += kiln_optest_sweep("Split", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(6, 5), -2, 2, 1459)},
                               3, "split equal parts f32");
    fails += kiln_optest_sweep("Split", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(6, 5), -2, 2, 1460)},
                               3, "split equal parts i64");
    fails += kiln_optest_sweep("Split", "", 0, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(6, 5), -2, 2, 1461)},
                               3, "split equal parts u8");
    fails += kiln_optest_sweep("Split", "axis=-1;num_outputs=3", 18, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 7), -2, 2, 1462)},
                               3, "split num_outputs, smaller last part f32");
    fails += kiln_optest_sweep("Split", "axis=-1;num_outputs=3", 18, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(2, 3, 7), -2, 2, 1463)},
                               3, "split num_outputs, smaller last part i64");
    fails += kiln_optest_sweep("Split", "axis=-1;num_outputs=3", 18, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(2, 3, 7), -2, 2, 1464)},
                               3, "split num_outputs, smaller last part u8");
    fails += kiln_optest_sweep("Split", "axis=2", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 9), -2, 2, 1465),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(0, 5, 4))},
                               3, "split a zero-size part f32");
    fails += kiln_optest_sweep("Split", "axis=2", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(2, 3, 9), -2, 2, 1466),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(0, 5, 4))},
                               3, "split a zero-size part i64");
    fails += kiln_optest_sweep("Split", "axis=2", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(2, 3, 9), -2, 2, 1467),
                                                kt_make(KILN_I64, 1, KT_DIMS(3), KT_VALS(0, 5, 4))},
                               3, "split a zero-size part u8");
    fails += kiln_optest_sweep("Split", "axis=0;split=[1,2]", 11, 1,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 4), -2, 2, 1468)},
                               2, "split split attribute f32");
    fails += kiln_optest_sweep("Split", "axis=0;split=[1,2]", 11, 1,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(3, 4), -2, 2, 1469)},
                               2, "split split attribute i64");
    fails += kiln_optest_sweep("Split", "axis=0;split=[1,2]", 11, 1,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(3, 4), -2, 2, 1470)},
                               2, "split split attribute u8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_split = {
    .precision = KILN_PREC_FOLLOW, .prec_flags = KILN_PREC_SHRINKS, .layout = KILN_LAYOUT_PARTS,
    .name = "Split", .min_inputs = 1, .max_inputs = 2, .min_outputs = 1, .max_outputs = -1,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
    .grad = grad,
};

const kiln_op_def kiln_op_split_grad = {
    .precision = KILN_PREC_FP32,
    .name = "SplitGrad", .domain = "kiln", .min_inputs = 1, .max_inputs = -1, .min_outputs = 1,
    .max_outputs = 1, .value_inputs = 1u << 1, .shape_only_inputs = 1u << 0,
    .infer = infer_grad, .cpu_forward = forward_grad, .test = KILN_OP_TESTS(test_grad),
};
