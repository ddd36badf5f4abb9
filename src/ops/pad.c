/* pad.c — Pad (opsets 1..21). Before opset 11 pads (opset 1: paddings) and the constant
 * `value` (a float, default 0) are attributes; from opset 11 pads is an int64 1-D input of
 * [begin_0, ..., begin_n-1, end_0, ..., end_n-1] for the padded axes, which are all axes
 * or, from opset 18, those of the optional `axes` input (negative allowed). Negative pads
 * crop. `mode`: constant (the optional scalar constant_value input, same dtype as data,
 * default 0), reflect (mirrors without repeating the edge, as numpy.pad does, also past
 * one period), edge (repeats the edge) and wrap (opset 19: periodic). Any dtype.
 *
 * Gradient w.r.t. data: kiln.PadGrad(dY, X, pads, <unused>, axes) with Pad's mode and
 * opset (X read shape-only). Constant mode copies the interior of dY back (zeros where
 * Pad cropped); reflect, edge and wrap add every padded element into the input element
 * it copied. Float dtypes. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>
#include <string.h>

typedef enum pad_mode { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE, PAD_WRAP } pad_mode;

/* Per axis of data: elements added before and after (negative: removed). */
typedef struct pad_plan {
    pad_mode mode;
    int64_t begin[KILN_MAX_DIMS], end[KILN_MAX_DIMS];
} pad_plan;

/* The padding of data = c->in[at] by the pads (at + 1) and axes (at + 3) inputs (Pad: at
 * 0; PadGrad: 1). */
static kiln_status plan(kiln_op_ctx *c, int at, pad_plan *p) {
    const kiln_tensor *x = c->in[at];
    const bool attr_form = c->node->opset < 11;
    const char *mode = kiln_attr_string(c->node, "mode", "constant");
    if (strcmp(mode, "constant") == 0) p->mode = PAD_CONSTANT;
    else if (strcmp(mode, "reflect") == 0) p->mode = PAD_REFLECT;
    else if (strcmp(mode, "edge") == 0) p->mode = PAD_EDGE;
    else if (strcmp(mode, "wrap") == 0 && c->node->opset >= 19) p->mode = PAD_WRAP;
    else return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "mode '%s' is not supported", mode);

    int64_t pads[2 * KILN_MAX_DIMS], axes[KILN_MAX_DIMS];
    int np, na;
    if (attr_form) {
        /* opsets 1..10: pads (opset 1: paddings) and value are attributes */
        KILN_OP_CHECK(c, c->n_in == at + 1, KILN_ERR_INVALID_ARGUMENT,
                      "Pad before opset 11 takes pads as an attribute, not an input (the node is opset %d)",
                      c->node->opset);
        const int64_t *ap = kiln_attr_ints(c->node, c->node->opset < 2 ? "paddings" : "pads", &np);
        KILN_OP_CHECK(c, ap != NULL, KILN_ERR_INVALID_ARGUMENT, "attribute '%s' is required before opset 11",
                      c->node->opset < 2 ? "paddings" : "pads");
        KILN_OP_CHECK(c, np <= 2 * KILN_MAX_DIMS, KILN_ERR_SHAPE, "pads has %d values", np);
        for (int k = 0; k < np; k++) pads[k] = ap[k];
    } else {
        KILN_OP_CHECK(c, c->n_in > at + 1 && c->in[at + 1], KILN_ERR_INVALID_ARGUMENT,
                      "input pads is required from opset 11 on (the node is opset %d)", c->node->opset);
        kiln_status st = kiln_read_ints(c, at + 1, "pads", pads, 2 * KILN_MAX_DIMS, &np);
        if (st != KILN_OK) return st;
    }
    if (!attr_form && c->n_in > at + 3 && c->in[at + 3]) {
        KILN_OP_CHECK(c, c->node->opset >= 18, KILN_ERR_SHAPE,
                      "input axes exists from opset 18 on");
        kiln_status st = kiln_read_ints(c, at + 3, "axes", axes, KILN_MAX_DIMS, &na);
        if (st != KILN_OK) return st;
    } else {
        na = x->ndim;
        for (int d = 0; d < na; d++) axes[d] = d;
    }
    KILN_OP_CHECK(c, np == 2 * na, KILN_ERR_SHAPE, "pads has %d values for %d axes", np, na);
    bool seen[KILN_MAX_DIMS] = {false};
    memset(p->begin, 0, sizeof p->begin);
    memset(p->end, 0, sizeof p->end);
    for (int k = 0; k < na; k++) {
        int64_t a = axes[k];
        KILN_OP_CHECK(c, kiln_norm_axis(&a, x->ndim), KILN_ERR_SHAPE,
                      "axes[%d] = %" PRId64 " is out of range for rank %d", k, axes[k], x->ndim);
        KILN_OP_CHECK(c, !seen[a], KILN_ERR_SHAPE, "axis %" PRId64 " is given twice", a);
        seen[a] = true;
        /* beyond +-2^62 a pad overflows the sum below; no such pad leaves a valid size */
        const int64_t lim = (int64_t)1 << 62;
        KILN_OP_CHECK(c, pads[k] > -lim && pads[k] < lim && pads[na + k] > -lim && pads[na + k] < lim,
                      KILN_ERR_SHAPE, "pads %" PRId64 " and %" PRId64 " of axis %" PRId64 " are out of range",
                      pads[k], pads[na + k], a);
        p->begin[a] = pads[k];
        p->end[a] = pads[na + k];
        int64_t dim = x->dims[a] + pads[k] + pads[na + k];
        KILN_OP_CHECK(c, dim >= 0, KILN_ERR_SHAPE,
                      "pads %" PRId64 " and %" PRId64 " leave axis %" PRId64 " of size %" PRId64
                      " with a negative size",
                      pads[k], pads[na + k], a, x->dims[a]);
        KILN_OP_CHECK(c, p->mode == PAD_CONSTANT || x->dims[a] > 0 || dim == 0, KILN_ERR_SHAPE,
                      "mode '%s' cannot pad the empty axis %" PRId64, mode, a);
    }
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    pad_plan p;
    kiln_status st = plan(c, 0, &p);
    if (st != KILN_OK) return st;
    const kiln_tensor *v = c->n_in > 2 ? c->in[2] : NULL;
    if (v) {
        KILN_OP_CHECK(c, v->dtype == x->dtype, KILN_ERR_TYPE,
                      "constant_value has dtype %s, data has %s", kiln_dtype_name(v->dtype),
                      kiln_dtype_name(x->dtype));
        KILN_OP_CHECK(c, kiln_tensor_numel(v) <= 1, KILN_ERR_SHAPE,
                      "constant_value must be a scalar");
    }
    int64_t dims[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) dims[d] = x->dims[d] + p.begin[d] + p.end[d];
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, dims);
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) {
    return kiln_axis_maps_bytes(c->out[0]->ndim, c->out[0]->dims);
}

/* The source index of padded position q (already shifted by the begin pad) on an axis of
 * size n, or -1 for the constant. */
static int64_t source(pad_mode mode, int64_t q, int64_t n) {
    if (q >= 0 && q < n) return q;
    switch (mode) {
    case PAD_CONSTANT: return -1;
    case PAD_EDGE: return q < 0 ? 0 : n - 1;
    case PAD_WRAP: return ((q % n) + n) % n;
    case PAD_REFLECT: {
        if (n == 1) return 0;
        int64_t period = 2 * (n - 1), m = ((q % period) + period) % period;
        return m < n ? m : period - m;
    }
    }
    return -1;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    if (kiln_tensor_numel(y) == 0) return KILN_OK;
    pad_plan p;
    kiln_status st = plan(c, 0, &p);
    if (st != KILN_OK) return st;
    int64_t stride[KILN_MAX_DIMS], *maps[KILN_MAX_DIMS];
    kiln_strides(x->ndim, x->dims, stride);
    kiln_axis_maps_carve(maps, c->workspace, y->ndim, y->dims);
    for (int d = 0; d < y->ndim; d++)
        for (int64_t j = 0; j < y->dims[d]; j++) {
            int64_t s = source(p.mode, j - p.begin[d], x->dims[d]);
            maps[d][j] = s < 0 ? -1 : s * stride[d];
        }
    uint64_t zero = 0, attr_value = 0;
    const kiln_tensor *v = c->n_in > 2 ? c->in[2] : NULL;
    const void *fill = v && kiln_tensor_numel(v) == 1 ? v->data : &zero;
    if (c->node->opset < 11) { /* the value attribute (a float) in data's dtype */
        kiln_tensor t = {.dtype = x->dtype, .data = &attr_value};
        kiln_set_f64(&t, 0, kiln_attr_float(c->node, "value", 0.0f));
        fill = &attr_value;
    }
    kiln_gather_axes(y->data, x->data, kiln_dtype_size(x->dtype), y->ndim, y->dims,
                     (const int64_t *const *)maps, fill);
    return KILN_OK;
}

/* ---------------------------------------------------------------- gradient */

static kiln_status grad(kiln_grad_ctx *g) {
    static const char *const what[4] = {"data", "pads", "constant_value", "axes"};
    for (int k = 1; k < 4; k++) {
        kiln_status st = kiln_grad_refuse(g, k, what[k]);
        if (st != KILN_OK) return st;
    }
    if (!g->need[0]) return KILN_OK;
    const kiln_node *n = KILN_GRAD_NODE(g);
    if (n->opset < 11)
        return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                         "Pad node '%s': no gradient for the opset-%d form (pads as an attribute)", n->name, n->opset);
    int in[5] = {g->dy[0], n->in[0], n->in[1], -1, n->n_in > 3 ? n->in[3] : -1};
    g->dx[0] = kiln_grad_emit(g, "kiln", "PadGrad", in[4] >= 0 ? 5 : 3, in, 1, NULL, true, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "X must be a float tensor, not %s", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, dy->dtype == x->dtype, KILN_ERR_TYPE, "dY has dtype %s, X has %s",
                  kiln_dtype_name(dy->dtype), kiln_dtype_name(x->dtype));
    pad_plan p;
    kiln_status st = plan(c, 1, &p);
    if (st != KILN_OK) return st;
    int64_t dims[KILN_MAX_DIMS];
    bool same = dy->ndim == x->ndim;
    for (int d = 0; d < x->ndim; d++) {
        dims[d] = x->dims[d] + p.begin[d] + p.end[d];
        same = same && dy->dims[d] == dims[d];
    }
    char want[160];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY must have the padded shape %s",
                  kiln_dims_str(x->ndim, dims, want, sizeof want));
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static bool constant_mode(const kiln_node *n) {
    return strcmp(kiln_attr_string(n, "mode", "constant"), "constant") == 0;
}

/* constant: offset tables over dX's axes; otherwise over dY's, then the accumulator */
static size_t workspace_grad(const kiln_op_ctx *c) {
    if (constant_mode(c->node)) return kiln_axis_maps_bytes(c->out[0]->ndim, c->out[0]->dims);
    return kiln_axis_maps_bytes(c->in[0]->ndim, c->in[0]->dims) +
           kiln_scatter_add_bytes(c->out[0]);
}

static kiln_status forward_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0];
    kiln_tensor *dx = c->out[0];
    if (kiln_tensor_numel(dx) == 0) return KILN_OK;
    pad_plan p;
    kiln_status st = plan(c, 1, &p);
    if (st != KILN_OK) return st;
    int64_t stride[KILN_MAX_DIMS], *maps[KILN_MAX_DIMS];
    if (p.mode == PAD_CONSTANT) {
        /* each element of X was copied once, to begin positions further on (or cropped) */
        kiln_strides(dy->ndim, dy->dims, stride);
        kiln_axis_maps_carve(maps, c->workspace, dx->ndim, dx->dims);
        for (int d = 0; d < dx->ndim; d++)
            for (int64_t i = 0; i < dx->dims[d]; i++) {
                int64_t q = i + p.begin[d];
                maps[d][i] = q >= 0 && q < dy->dims[d] ? q * stride[d] : -1;
            }
        const uint64_t zero = 0;
        kiln_gather_axes(dx->data, dy->data, kiln_dtype_size(dx->dtype), dx->ndim, dx->dims,
                         (const int64_t *const *)maps, &zero);
        return KILN_OK;
    }
    kiln_strides(dx->ndim, dx->dims, stride);
    kiln_axis_maps_carve(maps, c->workspace, dy->ndim, dy->dims);
    for (int d = 0; d < dy->ndim; d++)
        for (int64_t j = 0; j < dy->dims[d]; j++)
            maps[d][j] = source(p.mode, j - p.begin[d], dx->dims[d]) * stride[d];
    char *acc = (char *)c->workspace + kiln_axis_maps_bytes(dy->ndim, dy->dims);
    kiln_scatter_add_axes(dx, dy, (const int64_t *const *)maps, acc);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static kiln_tensor *ints(int n, const double *v) { return kt_make(KILN_I64, 1, KT_DIMS(n), v); }

static kiln_tensor *arange(kiln_dtype dt, int64_t rows, int64_t cols) {
    kiln_tensor *t = kt_make(dt, 2, KT_DIMS(rows, cols), NULL);
    for (int64_t i = 0; t && i < rows * cols; i++) kiln_set_f64(t, i, (double)(i + 1));
    return t;
}

static int test_grad(void) {
    int fails = 0;
    /* random 4-D, for the CUDA sweep: each mode, and a crop */
    {
        static const char *const modes[] = {"mode=constant", "mode=reflect", "mode=edge", "mode=wrap"};
        for (int m = 0; m < 4; m++)
            fails += kiln_optest_sweep("PadGrad", modes[m], 0, 3,
                                       (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 7, 8), -1, 1, 930 + m),
                                                         kt_make(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), NULL),
                                                         kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 0, 1, 2, 0, 0, 2, 1))},
                                       1, modes[m]);
        fails += kiln_optest_sweep("PadGrad", "mode=constant", 0, 3,
                                   (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 4, 5, 3), -1, 1, 935),
                                                     kt_make(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), NULL),
                                                     kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 1, -1, 0, 0, 0, 2, -2))},
                                   1, "pad grad random crop");
    }
    kiln_tensor *in[5], *want;
    /* expected values from numpy: dX[i] = sum(np.pad(e_i, pads, mode) * dY) over the unit
     * tensors e_i of X's shape, dY = 1, 2, 3... */
    in[0] = arange(KILN_F32, 3, 3);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[2] = ints(4, KT_VALS(1, -1, 0, 1));
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 4, 5, 0, 7, 8));
    fails += kiln_optest("PadGrad", "mode=constant", 3, in, 1, &want, 0, 0,
                         "pad grad constant, one axis cropped");

    in[0] = arange(KILN_F64, 5, 9);
    in[1] = kt_make(KILN_F64, 2, KT_DIMS(2, 3), NULL);
    in[2] = ints(4, KT_VALS(1, 2, 2, 4));
    want = kt_make(KILN_F64, 2, KT_DIMS(2, 3), KT_VALS(92, 184, 138, 138, 276, 207));
    fails += kiln_optest("PadGrad", "mode=reflect", 3, in, 1, &want, 0, 0,
                         "pad grad reflect past a period");

    in[0] = arange(KILN_F16, 3, 6);
    in[1] = kt_make(KILN_F16, 2, KT_DIMS(2, 3), NULL);
    in[2] = ints(4, KT_VALS(0, 2, 1, 1));
    want = kt_make(KILN_F16, 2, KT_DIMS(2, 3), KT_VALS(6, 4, 11, 66, 26, 58));
    fails += kiln_optest("PadGrad", "mode=edge", 3, in, 1, &want, 0, 0, "pad grad edge f16");

    in[0] = arange(KILN_F32, 4, 9);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[2] = ints(4, KT_VALS(1, 2, 1, 4));
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(144, 132, 138, 90, 78, 84));
    fails += kiln_optest("PadGrad", "mode=wrap", 3, in, 1, &want, 0, 0, "pad grad wrap");

    /* opset 18 axes: only the last axis, padded by 2 before and 1 after */
    in[0] = arange(KILN_F32, 2, 6);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[2] = ints(2, KT_VALS(2, 1));
    in[3] = NULL;
    in[4] = ints(1, KT_VALS(-1));
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(3, 4, 5, 9, 10, 11));
    fails += kiln_optest("PadGrad", "", 5, in, 1, &want, 0, 0, "pad grad opset 18 axes");

    in[0] = arange(KILN_F32, 3, 5);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[2] = ints(4, KT_VALS(1, 1, 0, 0));
    fails += kiln_optest_fails("PadGrad", "", 3, in, 1, KILN_ERR_SHAPE,
                               "pad grad dY of the wrong shape");
    return fails;
}

static int test(void) {
    int fails = 0;
    kiln_tensor *in[4], *y;
    const double v[] = {0, 1, 2, 3, 4, 5};
    /* expected values from numpy.pad(np.arange(6).reshape(2, 3), ...) */
    /* opset 2..10: pads and value as attributes (pytorch's opset-6 exports) */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    fails += kiln_optest_fails("Pad", "pads=[1,1,0,1]", 1, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "pad opset 21 without the pads input");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 5), KT_VALS(-1, -1, -1, -1, -1, -1, 0, 1, 2, -1, -1, 3, 4, 5, -1));
    fails += kiln_optest_opset("Pad", "pads=[1,1,0,1];value=-1.0", 6, 1, in, 1, &y, 0, 0,
                               "pad opset 6 attributes, constant value");
    in[0] = kt_make(KILN_I32, 2, KT_DIMS(2, 3), v);
    y = kt_make(KILN_I32, 2, KT_DIMS(2, 5), KT_VALS(1, 0, 1, 2, 1, 4, 3, 4, 5, 4));
    fails += kiln_optest_opset("Pad", "pads=[0,1,0,1];mode=reflect", 2, 1, in, 1, &y, 0, 0,
                               "pad opset 2 attributes, reflect i32");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    y = kt_make(KILN_F32, 2, KT_DIMS(2, 4), KT_VALS(0, 0, 1, 2, 3, 3, 4, 5));
    fails += kiln_optest_opset("Pad", "paddings=[0,1,0,0];mode=edge", 1, 1, in, 1, &y, 0, 0,
                               "pad opset 1 paddings, edge");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = ints(4, KT_VALS(1, 2, 0, 1));
    in[2] = kt_scalar(KILN_F32, 9);
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 6), KT_VALS(9, 9, 9, 9, 9, 9, 9, 9, 0, 1, 2, 9, 9, 9,
                                                    3, 4, 5, 9));
    fails += kiln_optest("Pad", "mode=constant", 3, in, 1, &y, 0, 0, "pad constant 9");

    in[0] = kt_make(KILN_I32, 2, KT_DIMS(2, 3), v);
    in[1] = ints(4, KT_VALS(1, 2, 2, 4));
    y = kt_make(KILN_I32, 2, KT_DIMS(5, 9),
                KT_VALS(5, 4, 3, 4, 5, 4, 3, 4, 5, 2, 1, 0, 1, 2, 1, 0, 1, 2, 5, 4, 3, 4, 5, 4,
                        3, 4, 5, 2, 1, 0, 1, 2, 1, 0, 1, 2, 5, 4, 3, 4, 5, 4, 3, 4, 5));
    fails += kiln_optest("Pad", "mode=reflect", 2, in, 1, &y, 0, 0, "pad reflect past a period");

    in[0] = kt_make(KILN_F16, 2, KT_DIMS(2, 3), v);
    in[1] = ints(4, KT_VALS(0, 2, 1, 1));
    y = kt_make(KILN_F16, 2, KT_DIMS(3, 6),
                KT_VALS(0, 0, 0, 1, 2, 2, 3, 3, 3, 4, 5, 5, 3, 3, 3, 4, 5, 5));
    fails += kiln_optest("Pad", "mode=edge", 2, in, 1, &y, 0, 0, "pad edge f16");

    in[0] = kt_make(KILN_I64, 2, KT_DIMS(2, 3), v);
    in[1] = ints(4, KT_VALS(1, 2, 1, 4));
    y = kt_make(KILN_I64, 2, KT_DIMS(4, 9),
                KT_VALS(4, 5, 3, 4, 5, 3, 4, 5, 3, 1, 2, 0, 1, 2, 0, 1, 2, 0, 4, 5, 3, 4, 5, 3,
                        4, 5, 3, 1, 2, 0, 1, 2, 0, 1, 2, 0));
    fails += kiln_optest("Pad", "mode=wrap", 2, in, 1, &y, 0, 0, "pad wrap");

    in[0] = kt_make(KILN_F64, 2, KT_DIMS(2, 3), v);
    in[1] = ints(4, KT_VALS(-1, 0, 0, 1));
    in[2] = NULL;
    y = kt_make(KILN_F64, 2, KT_DIMS(1, 4), KT_VALS(3, 4, 5, 0));
    fails += kiln_optest("Pad", "", 3, in, 1, &y, 0, 0, "pad negative crops, default zero");

    in[0] = kt_make(KILN_U8, 2, KT_DIMS(2, 3), v);
    in[1] = ints(2, KT_VALS(2, 1));
    in[2] = kt_scalar(KILN_U8, 9);
    in[3] = ints(1, KT_VALS(-1));
    y = kt_make(KILN_U8, 2, KT_DIMS(2, 6), KT_VALS(9, 9, 0, 1, 2, 9, 9, 9, 3, 4, 5, 9));
    fails += kiln_optest("Pad", "", 4, in, 1, &y, 0, 0, "pad opset 18 axes");

    /* big enough for the threaded path: expected values from a naive loop over y */
    in[0] = kt_rand(KILN_I16, 3, KT_DIMS(3, 100, 250), -1000, 1000, 3);
    in[1] = ints(6, KT_VALS(1, -2, 3, 0, 5, -4));
    in[2] = kt_scalar(KILN_I16, -7);
    y = kt_make(KILN_I16, 3, KT_DIMS(4, 103, 249), NULL);
    const int16_t *xp = in[0]->data; // (3,100,250)
    int16_t *yp = y->data;           // (4,103,249): x[i-1, j+2, k-3] inside, -7 outside
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 103; j++)
            for (int k = 0; k < 249; k++) {
                int si = i - 1, sj = j + 2, sk = k - 3;
                bool inside = si >= 0 && si < 3 && sj < 100 && sk >= 0 && sk < 250;
                yp[(i * 103 + j) * 249 + k] = inside ? xp[(si * 100 + sj) * 250 + sk] : -7;
            }
    fails += kiln_optest("Pad", "", 3, in, 1, &y, 0, 0, "pad large, mixed crop and pad");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = ints(2, KT_VALS(1, 1));
    fails += kiln_optest_fails("Pad", "", 2, in, 1, KILN_ERR_SHAPE, "pad 2 values for rank 2");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = ints(4, KT_VALS(0, -2, 0, -2));
    fails += kiln_optest_fails("Pad", "", 2, in, 1, KILN_ERR_SHAPE, "pad crops below zero");
    /* pads whose sum overflows int64: 3 - 2 (2^63 - 1024) wrapped around to 2051 */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = ints(4, KT_VALS(0, -9223372036854774784.0, 0, -9223372036854774784.0));
    fails += kiln_optest_fails("Pad", "", 2, in, 1, KILN_ERR_SHAPE, "pad overflowing int64");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = ints(4, KT_VALS(0, 0, 0, 0));
    fails += kiln_optest_fails("Pad", "mode=mirror", 2, in, 1, KILN_ERR_UNSUPPORTED,
                               "pad unknown mode");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(0, 3), NULL);
    in[1] = ints(4, KT_VALS(1, 0, 0, 0));
    fails += kiln_optest_fails("Pad", "mode=edge", 2, in, 1, KILN_ERR_SHAPE,
                               "pad edge of an empty axis");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), v);
    in[1] = ints(4, KT_VALS(0, 0, 0, 0));
    in[2] = kt_scalar(KILN_F64, 1);
    fails += kiln_optest_fails("Pad", "", 3, in, 1, KILN_ERR_TYPE, "pad f64 constant for f32");

    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -1, 1, 1);
    in[1] = ints(6, KT_VALS(1, 0, -1, 0, 2, 2));
    in[2] = kt_scalar(KILN_F64, 0.5);
    fails += kiln_gradcheck("Pad", "", 0, 3, in, NULL, "pad grad constant, crop and pad");
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 2);
    in[1] = ints(4, KT_VALS(2, 5, 3, 1));
    fails += kiln_gradcheck("Pad", "mode=reflect", 0, 2, in, NULL, "pad grad reflect");
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 3);
    in[1] = ints(4, KT_VALS(1, -1, 2, 3));
    fails += kiln_gradcheck("Pad", "mode=edge", 0, 2, in, NULL, "pad grad edge with a crop");
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(2, 3), -1, 1, 4);
    in[1] = ints(4, KT_VALS(3, 1, 1, 5));
    fails += kiln_gradcheck("Pad", "mode=wrap", 19, 2, in, NULL, "pad grad wrap");
    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 2), -1, 1, 5);
    in[1] = ints(2, KT_VALS(1, 2));
    in[2] = NULL;
    in[3] = ints(1, KT_VALS(1));
    fails += kiln_gradcheck("Pad", "mode=reflect", 18, 4, in, NULL, "pad grad opset 18 axes");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Pad", "mode=constant", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 391),
                                                kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 1, 2, 3, 0, 2, 1, 0)),
                                                kt_scalar(KILN_F32, 0.5)},
                               1, "pad random constant 0.5");
    fails += kiln_optest_sweep("Pad", "mode=reflect", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 392),
                                                kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 0, 2, 3, 0, 0, 1, 2))},
                               1, "pad random reflect");
    /* the pad-channels pass's zero channels at the end of dim 1 (NHWC in the sweep too) */
    fails += kiln_optest_sweep("Pad", "mode=constant", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 3, 5), -2, 2, 393),
                                                kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 0, 0, 0, 0, 2, 0, 0))},
                               1, "pad zero channels 6 to 8");
    /* the innermost axis not padded (rows moved whole, in units of up to 16 bytes on CUDA),
     * and nothing padded at all (Swin pads 56 to whole windows of 7 by 0) */
    fails += kiln_optest_sweep("Pad", "mode=constant", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 8), -2, 2, 394),
                                                kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 0, 1, 0, 0, 1, 2, 0))},
                               1, "pad rows whole, zero");
    fails += kiln_optest_sweep("Pad", "mode=edge", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 8), -2, 2, 395),
                                                kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 0, 2, 0, 0, 0, 1, 0))},
                               1, "pad rows whole, edge");
    fails += kiln_optest_sweep("Pad", "mode=constant", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 8), -2, 2, 396),
                                                kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 0, 0, 0, 0, 0, 0, 0))},
                               1, "pad by nothing");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Pad", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 3, 4), -2, 2, 1417),
                                                kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(0, 1, 2, 1, 0, 1)),
                                                kt_rand(KILN_F32, 0, NULL, -5, 5, 1418)},
                               1, "pad constant, value input f32");
    fails += kiln_optest_sweep("Pad", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(2, 3, 4), -2, 2, 1419),
                                                kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(0, 1, 2, 1, 0, 1)),
                                                kt_rand(KILN_I64, 0, NULL, -5, 5, 1420)},
                               1, "pad constant, value input i64");
    fails += kiln_optest_sweep("Pad", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(2, 3, 4), -2, 2, 1421),
                                                kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(0, 1, 2, 1, 0, 1)),
                                                kt_rand(KILN_U8, 0, NULL, -5, 5, 1422)},
                               1, "pad constant, value input u8");
    fails += kiln_optest_sweep("Pad", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 5, 6), -2, 2, 1423),
                                                kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 0, 1, 2, 0, 0, 2, 1))},
                               1, "pad constant 0 f32");
    fails += kiln_optest_sweep("Pad", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(1, 2, 5, 6), -2, 2, 1424),
                                                kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 0, 1, 2, 0, 0, 2, 1))},
                               1, "pad constant 0 i64");
    fails += kiln_optest_sweep("Pad", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(1, 2, 5, 6), -2, 2, 1425),
                                                kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 0, 1, 2, 0, 0, 2, 1))},
                               1, "pad constant 0 u8");
    fails += kiln_optest_sweep("Pad", "mode=reflect", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 5, 3), -2, 2, 1426),
                                                kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 0, 3, 7, 0, 0, 2, 5))},
                               1, "pad reflect, past one period f32");
    fails += kiln_optest_sweep("Pad", "mode=reflect", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(1, 2, 5, 3), -2, 2, 1427),
                                                kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 0, 3, 7, 0, 0, 2, 5))},
                               1, "pad reflect, past one period i64");
    fails += kiln_optest_sweep("Pad", "mode=reflect", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(1, 2, 5, 3), -2, 2, 1428),
                                                kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(0, 0, 3, 7, 0, 0, 2, 5))},
                               1, "pad reflect, past one period u8");
    fails += kiln_optest_sweep("Pad", "mode=edge", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 4), -2, 2, 1429),
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(2, 3, 1, 0))},
                               1, "pad edge f32");
    fails += kiln_optest_sweep("Pad", "mode=edge", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(3, 4), -2, 2, 1430),
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(2, 3, 1, 0))},
                               1, "pad edge i64");
    fails += kiln_optest_sweep("Pad", "mode=edge", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(3, 4), -2, 2, 1431),
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(2, 3, 1, 0))},
                               1, "pad edge u8");
    fails += kiln_optest_sweep("Pad", "mode=wrap", 19, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 4), -2, 2, 1432),
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 2, 5, 6))},
                               1, "pad wrap f32");
    fails += kiln_optest_sweep("Pad", "mode=wrap", 19, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(3, 4), -2, 2, 1433),
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 2, 5, 6))},
                               1, "pad wrap i64");
    fails += kiln_optest_sweep("Pad", "mode=wrap", 19, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(3, 4), -2, 2, 1434),
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 2, 5, 6))},
                               1, "pad wrap u8");
    fails += kiln_optest_sweep("Pad", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 5, 6), -2, 2, 1435),
                                                kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(-1, 0, 2, 1, -2, -1))},
                               1, "pad negative pads crop f32");
    fails += kiln_optest_sweep("Pad", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(4, 5, 6), -2, 2, 1436),
                                                kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(-1, 0, 2, 1, -2, -1))},
                               1, "pad negative pads crop i64");
    fails += kiln_optest_sweep("Pad", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(4, 5, 6), -2, 2, 1437),
                                                kt_make(KILN_I64, 1, KT_DIMS(6), KT_VALS(-1, 0, 2, 1, -2, -1))},
                               1, "pad negative pads crop u8");
    fails += kiln_optest_sweep("Pad", "mode=edge", 18, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1438),
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 2, 3, 4)),
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, -1))},
                               1, "pad axes input f32");
    fails += kiln_optest_sweep("Pad", "mode=edge", 18, 4,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1439),
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 2, 3, 4)),
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, -1))},
                               1, "pad axes input i64");
    fails += kiln_optest_sweep("Pad", "mode=edge", 18, 4,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1440),
                                                kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 2, 3, 4)),
                                                NULL,
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, -1))},
                               1, "pad axes input u8");
    fails += kiln_optest_sweep("Pad", "mode=reflect", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 8, KT_DIMS(2, 1, 2, 1, 3, 1, 2, 3), -2, 2, 1441),
                                                kt_make(KILN_I64, 1, KT_DIMS(16), KT_VALS(0, 0, 1, 0, 2, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 2))},
                               1, "pad 8-D f32");
    fails += kiln_optest_sweep("Pad", "mode=reflect", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 8, KT_DIMS(2, 1, 2, 1, 3, 1, 2, 3), -2, 2, 1442),
                                                kt_make(KILN_I64, 1, KT_DIMS(16), KT_VALS(0, 0, 1, 0, 2, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 2))},
                               1, "pad 8-D i64");
    fails += kiln_optest_sweep("Pad", "mode=reflect", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 8, KT_DIMS(2, 1, 2, 1, 3, 1, 2, 3), -2, 2, 1443),
                                                kt_make(KILN_I64, 1, KT_DIMS(16), KT_VALS(0, 0, 1, 0, 2, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 2))},
                               1, "pad 8-D u8");
    return fails;
}
#endif /* KILN_OPTESTS */

/* alias_when: every pad is 0 (a pad to a multiple the dims already are), in one byte order. */
static bool pads_nothing(const kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *y = c->out[0];
    if (x->ndim != y->ndim || x->format != y->format) return false;
    for (int k = 1; k < c->n_in; k++) /* the plan knows the pads and axes */
        if (k != 2 && c->in[k] && !c->in[k]->data) return false;
    pad_plan p;
    if (plan((kiln_op_ctx *)c, 0, &p) != KILN_OK) return false;
    for (int d = 0; d < x->ndim; d++)
        if (y->dims[d] != x->dims[d] || p.begin[d] != 0 || p.end[d] != 0) return false;
    return true;
}

const kiln_op_def kiln_op_pad = {
    .precision = KILN_PREC_FOLLOW, .layout = KILN_LAYOUT_FOLLOW,
    .name = "Pad", .min_inputs = 1, .max_inputs = 4, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = (1u << 1) | (1u << 3), .nondiff_inputs = 1u << 2, .infer = infer,
    .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test), .grad = grad,
    .alias_when = pads_nothing,
};

const kiln_op_def kiln_op_pad_grad = {
    .precision = KILN_PREC_FP32,
    .name = "PadGrad", .domain = "kiln", .min_inputs = 3, .max_inputs = 5, .min_outputs = 1,
    .max_outputs = 1, .value_inputs = (1u << 2) | (1u << 4), .shape_only_inputs = 1u << 1,
    .infer = infer_grad, .cpu_forward = forward_grad, .cpu_workspace = workspace_grad,
    .test = KILN_OP_TESTS(test_grad),
};
