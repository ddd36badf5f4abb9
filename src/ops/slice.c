/* slice.c — Slice (opsets 1..21; before opset 10 starts, ends and axes are attributes and
 * steps are 1; from opset 10 they are inputs): data[starts:ends:steps]
 * along `axes`. starts/ends/axes/steps are int32 or int64 1-D inputs; axes default to
 * 0..len(starts)-1 and may be negative, steps default to 1 and may be negative (not 0).
 * Per the spec, negative starts/ends add the dim, then starts/ends are clamped to [0, dim]
 * for positive steps and to [0, dim-1] / [-1, dim-1] for negative steps, so out-of-range
 * values select nothing or everything instead of failing. Any dtype.
 *
 * Gradient: kiln.SliceGrad(dY, X, starts, ends, axes, steps) puts dY back where the slice
 * took it from in a dX of X's shape (X is read shape-only), zeros elsewhere. Any dtype. */
#include "../core/optest.h"
#include "movement.h"

#include <inttypes.h>

/* Per axis of data: first index, step and element count of the slice. */
typedef struct slice_plan {
    int64_t start[KILN_MAX_DIMS], step[KILN_MAX_DIMS], count[KILN_MAX_DIMS];
} slice_plan;

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The slice of data = c->in[at] by the inputs that follow it (Slice: at 0; SliceGrad: 1). */
static kiln_status plan(kiln_op_ctx *c, int at, slice_plan *p) {
    const kiln_tensor *x = c->in[at];
    int64_t starts[KILN_MAX_DIMS], ends[KILN_MAX_DIMS], axes[KILN_MAX_DIMS], steps[KILN_MAX_DIMS];
    int ns, ne, na, nst;
    if (c->node->opset < 10) {
        /* opsets 1..9: starts, ends and axes are attributes, steps are 1 */
        KILN_OP_CHECK(c, c->n_in == at + 1, KILN_ERR_INVALID_ARGUMENT,
                      "Slice before opset 10 takes starts, ends and axes as attributes, not inputs "
                      "(the node is opset %d)", c->node->opset);
        const int64_t *as = kiln_attr_ints(c->node, "starts", &ns);
        const int64_t *ae = kiln_attr_ints(c->node, "ends", &ne);
        KILN_OP_CHECK(c, as && ae, KILN_ERR_INVALID_ARGUMENT,
                      "attributes 'starts' and 'ends' are required before opset 10");
        KILN_OP_CHECK(c, ns == ne, KILN_ERR_SHAPE, "starts has %d values but ends has %d", ns, ne);
        KILN_OP_CHECK(c, ns <= KILN_MAX_DIMS, KILN_ERR_SHAPE, "starts has %d values (at most %d)", ns,
                      KILN_MAX_DIMS);
        const int64_t *aa = kiln_attr_ints(c->node, "axes", &na);
        KILN_OP_CHECK(c, !aa || na == ns, KILN_ERR_SHAPE, "axes has %d values but starts has %d", na, ns);
        for (int k = 0; k < ns; k++) {
            starts[k] = as[k];
            ends[k] = ae[k];
            axes[k] = aa ? aa[k] : k;
            steps[k] = 1;
        }
    } else {
    KILN_OP_CHECK(c, c->n_in > at + 2 && c->in[at + 1] && c->in[at + 2], KILN_ERR_INVALID_ARGUMENT,
                  "inputs starts and ends are required from opset 10 on (the node is opset %d)", c->node->opset);
    kiln_status st = kiln_read_ints(c, at + 1, "starts", starts, KILN_MAX_DIMS, &ns);
    if (st == KILN_OK) st = kiln_read_ints(c, at + 2, "ends", ends, KILN_MAX_DIMS, &ne);
    if (st != KILN_OK) return st;
    KILN_OP_CHECK(c, ns == ne, KILN_ERR_SHAPE, "starts has %d values but ends has %d", ns, ne);
    if (c->n_in > at + 3 && c->in[at + 3]) {
        st = kiln_read_ints(c, at + 3, "axes", axes, KILN_MAX_DIMS, &na);
        if (st != KILN_OK) return st;
        KILN_OP_CHECK(c, na == ns, KILN_ERR_SHAPE, "axes has %d values but starts has %d", na,
                      ns);
    } else {
        for (int k = 0; k < ns; k++) axes[k] = k;
    }
    if (c->n_in > at + 4 && c->in[at + 4]) {
        st = kiln_read_ints(c, at + 4, "steps", steps, KILN_MAX_DIMS, &nst);
        if (st != KILN_OK) return st;
        KILN_OP_CHECK(c, nst == ns, KILN_ERR_SHAPE, "steps has %d values but starts has %d",
                      nst, ns);
    } else {
        for (int k = 0; k < ns; k++) steps[k] = 1;
    }
    }
    bool seen[KILN_MAX_DIMS] = {false};
    for (int d = 0; d < x->ndim; d++) {
        p->start[d] = 0;
        p->step[d] = 1;
        p->count[d] = x->dims[d];
    }
    for (int k = 0; k < ns; k++) {
        int64_t a = axes[k];
        KILN_OP_CHECK(c, kiln_norm_axis(&a, x->ndim), KILN_ERR_SHAPE,
                      "axes[%d] = %" PRId64 " is out of range for rank %d", k, axes[k], x->ndim);
        KILN_OP_CHECK(c, !seen[a], KILN_ERR_SHAPE, "axis %" PRId64 " is given twice", a);
        seen[a] = true;
        KILN_OP_CHECK(c, steps[k] != 0, KILN_ERR_SHAPE, "steps[%d] is 0", k);
        int64_t dim = x->dims[a], s = starts[k], e = ends[k];
        /* a step beyond -INT64_MAX could not be negated; it takes one element either way */
        int64_t step = steps[k] < -INT64_MAX ? -INT64_MAX : steps[k];
        if (s < 0) s += dim;
        if (e < 0) e += dim;
        int64_t count;
        if (step > 0) {
            s = clamp(s, 0, dim);
            e = clamp(e, 0, dim);
            count = e > s ? (e - s - 1) / step + 1 : 0;
        } else {
            s = clamp(s, 0, dim - 1);
            e = clamp(e, -1, dim - 1);
            /* an empty axis has nothing to take ([0, dim - 1] is then empty) */
            count = dim > 0 && s > e ? (s - e - 1) / -step + 1 : 0;
        }
        p->start[a] = count > 0 ? s : 0;
        p->step[a] = step;
        p->count[a] = count;
    }
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    slice_plan p;
    kiln_status st = plan(c, 0, &p);
    if (st != KILN_OK) return st;
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, p.count);
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) {
    return kiln_axis_maps_bytes(c->out[0]->ndim, c->out[0]->dims);
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    if (kiln_tensor_numel(y) == 0) return KILN_OK;
    slice_plan p;
    kiln_status st = plan(c, 0, &p);
    if (st != KILN_OK) return st;
    int64_t stride[KILN_MAX_DIMS], *maps[KILN_MAX_DIMS];
    kiln_strides(x->ndim, x->dims, stride);
    kiln_axis_maps_carve(maps, c->workspace, y->ndim, y->dims);
    for (int d = 0; d < y->ndim; d++)
        for (int64_t j = 0; j < y->dims[d]; j++)
            maps[d][j] = (p.start[d] + j * p.step[d]) * stride[d];
    kiln_gather_axes(y->data, x->data, kiln_dtype_size(x->dtype), y->ndim, y->dims,
                     (const int64_t *const *)maps, NULL);
    return KILN_OK;
}

/* ---------------------------------------------------------------- gradient */

static kiln_status grad(kiln_grad_ctx *g) {
    static const char *const what[5] = {"data", "starts", "ends", "axes", "steps"};
    for (int k = 1; k < 5; k++) {
        kiln_status st = kiln_grad_refuse(g, k, what[k]);
        if (st != KILN_OK) return st;
    }
    if (!g->need[0]) return KILN_OK;
    const kiln_node *n = KILN_GRAD_NODE(g);
    if (n->opset < 10)
        return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                         "Slice node '%s': no gradient for the opset-%d form (starts and ends as attributes)",
                         n->name, n->opset);
    int in[6] = {g->dy[0], -1, -1, -1, -1, -1};
    for (int k = 0; k < n->n_in; k++) in[1 + k] = n->in[k];
    g->dx[0] = kiln_grad_emit(g, "kiln", "SliceGrad", n->n_in + 1, in, 1, NULL, false, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, dy->dtype == x->dtype, KILN_ERR_TYPE, "dY has dtype %s, X has %s",
                  kiln_dtype_name(dy->dtype), kiln_dtype_name(x->dtype));
    slice_plan p;
    kiln_status st = plan(c, 1, &p);
    if (st != KILN_OK) return st;
    bool same = dy->ndim == x->ndim;
    for (int d = 0; same && d < x->ndim; d++) same = dy->dims[d] == p.count[d];
    char want[160];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY must have the slice's shape %s",
                  kiln_dims_str(x->ndim, p.count, want, sizeof want));
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

/* A gather again, from dY into dX: position i of an axis of X is slice element
 * (i - start) / step when that divides evenly and falls inside the slice, else a zero. */
static kiln_status forward_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0];
    kiln_tensor *dx = c->out[0];
    if (kiln_tensor_numel(dx) == 0) return KILN_OK;
    slice_plan p;
    kiln_status st = plan(c, 1, &p);
    if (st != KILN_OK) return st;
    int64_t stride[KILN_MAX_DIMS], *maps[KILN_MAX_DIMS];
    kiln_strides(dy->ndim, dy->dims, stride);
    kiln_axis_maps_carve(maps, c->workspace, dx->ndim, dx->dims);
    for (int d = 0; d < dx->ndim; d++) {
        int64_t step = p.step[d], mag = step > 0 ? step : -step;
        for (int64_t i = 0; i < dx->dims[d]; i++) {
            int64_t q = step > 0 ? i - p.start[d] : p.start[d] - i;
            bool hit = q >= 0 && q % mag == 0 && q / mag < p.count[d];
            maps[d][i] = hit ? q / mag * stride[d] : -1;
        }
    }
    const uint64_t zero = 0;
    kiln_gather_axes(dx->data, dy->data, kiln_dtype_size(dx->dtype), dx->ndim, dx->dims,
                     (const int64_t *const *)maps, &zero);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static kiln_tensor *ints(int n, const double *v) { return kt_make(KILN_I64, 1, KT_DIMS(n), v); }

static int test_grad(void) {
    int fails = 0;
    fails += kiln_optest_sweep("SliceGrad", "", 0, 6,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 4, 5), -1, 1, 941),
                                                 kt_make(KILN_F32, 3, KT_DIMS(3, 8, 5), NULL),
                                                 kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 7)),
                                                 kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 0)),
                                                 kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 1)),
                                                 kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, -2))},
                               1, "slice grad random, negative step");
    kiln_tensor *in[6], *want;
    /* expected values from numpy: dx = zeros(X.shape); dx[slice] += dY */
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2), KT_VALS(1, 2, 3, 4, 5, 6, 7, 8));
    in[1] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), NULL); /* dx[:, 2:0:-1, ::2] */
    in[2] = ints(2, KT_VALS(2, 0));
    in[3] = ints(2, KT_VALS(0, 1000000));
    in[4] = ints(2, KT_VALS(1, 2));
    in[5] = ints(2, KT_VALS(-1, 2));
    want = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4),
                   KT_VALS(0, 0, 0, 0, 3, 0, 4, 0, 1, 0, 2, 0, 0, 0, 0, 0, 7, 0, 8, 0, 5, 0, 6, 0));
    fails += kiln_optest("SliceGrad", "", 6, in, 1, &want, 0, 0, "slice grad negative step");

    in[0] = kt_make(KILN_I32, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 4));
    in[1] = kt_make(KILN_I32, 2, KT_DIMS(3, 4), NULL); /* dx[1:1000, -1:-5:-3] */
    in[2] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(1, -1));
    in[3] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(1000, -5));
    in[4] = NULL;
    in[5] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(1, -3));
    want = kt_make(KILN_I32, 2, KT_DIMS(3, 4), KT_VALS(0, 0, 0, 0, 2, 0, 0, 1, 4, 0, 0, 3));
    fails += kiln_optest("SliceGrad", "", 6, in, 1, &want, 0, 0,
                         "slice grad int32 inputs, default axes, clamped ends");

    in[0] = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(1, 2, 3, 4, 5)); /* dx[::-1] */
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(5), NULL);
    in[2] = ints(1, KT_VALS(-1));
    in[3] = ints(1, KT_VALS(-9223372036854775808.0));
    in[4] = NULL;
    in[5] = ints(1, KT_VALS(-1));
    want = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(5, 4, 3, 2, 1));
    fails += kiln_optest("SliceGrad", "", 6, in, 1, &want, 0, 0, "slice grad reversed");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 0), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[2] = ints(1, KT_VALS(5));
    in[3] = ints(1, KT_VALS(10));
    in[4] = ints(1, KT_VALS(-1));
    want = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(0, 0, 0, 0, 0, 0));
    fails += kiln_optest("SliceGrad", "", 5, in, 1, &want, 0, 0, "slice grad empty slice");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[2] = ints(1, KT_VALS(0));
    in[3] = ints(1, KT_VALS(1));
    in[4] = ints(1, KT_VALS(1));
    fails += kiln_optest_fails("SliceGrad", "", 5, in, 1, KILN_ERR_SHAPE,
                               "slice grad dY of the wrong shape");
    return fails;
}

static int test(void) {
    int fails = 0;
    const double v[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
                        19, 20, 21, 22, 23};
    kiln_tensor *in[5], *y;
    /* expected values from numpy on np.arange(24).reshape(2,3,4) */
    /* opsets 1..9: starts, ends, axes as attributes (pytorch's opset-6 exports) */
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v); /* x[:, 1:, -3:-1] */
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2), KT_VALS(5, 6, 9, 10, 17, 18, 21, 22));
    fails += kiln_optest_opset("Slice", "starts=[1,-3];ends=[1000,-1];axes=[1,2]", 6, 1, in, 1, &y, 0, 0,
                               "slice opset 6 attributes");
    in[0] = kt_make(KILN_I64, 3, KT_DIMS(2, 3, 4), v); /* x[1:2, 0:1] */
    y = kt_make(KILN_I64, 3, KT_DIMS(1, 1, 4), KT_VALS(12, 13, 14, 15));
    fails += kiln_optest_opset("Slice", "starts=[1,0];ends=[2,1]", 1, 1, in, 1, &y, 0, 0,
                               "slice opset 1 attributes, default axes");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    fails += kiln_optest_fails("Slice", "", 1, in, 1, KILN_ERR_INVALID_ARGUMENT, "slice opset 21 without starts");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v); /* x[:, 2:0:-1, ::2] */
    in[1] = ints(2, KT_VALS(2, 0));
    in[2] = ints(2, KT_VALS(0, 1000000));
    in[3] = ints(2, KT_VALS(1, 2));
    in[4] = ints(2, KT_VALS(-1, 2));
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 2), KT_VALS(8, 10, 4, 6, 20, 22, 16, 18));
    fails += kiln_optest("Slice", "", 5, in, 1, &y, 0, 0, "slice negative step");

    in[0] = kt_make(KILN_I32, 3, KT_DIMS(2, 3, 4), v); /* x[1:1000, :, -1:-5:-3] */
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(1, -1));
    in[2] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(1000, -5));
    in[3] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(0, -1));
    in[4] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(1, -3));
    y = kt_make(KILN_I32, 3, KT_DIMS(1, 3, 2), KT_VALS(15, 12, 19, 16, 23, 20));
    fails += kiln_optest("Slice", "", 5, in, 1, &y, 0, 0, "slice int32 inputs, clamped ends");

    in[0] = kt_make(KILN_BOOL, 3, KT_DIMS(2, 3, 4), KT_VALS(1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1,
                                                            1, 0, 1, 1, 0, 1, 1, 0, 0, 1, 0,
                                                            0, 1));
    in[1] = ints(3, KT_VALS(0, -10, 1)); /* x[0:2, -10:100, 1:3], default axes and steps */
    in[2] = ints(3, KT_VALS(2, 100, 3));
    in[3] = NULL;
    in[4] = NULL;
    y = kt_make(KILN_BOOL, 3, KT_DIMS(2, 3, 2), KT_VALS(0, 0, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0));
    fails += kiln_optest("Slice", "", 5, in, 1, &y, 0, 0, "slice bool default axes");

    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = ints(1, KT_VALS(5));
    in[2] = ints(1, KT_VALS(10));
    in[3] = ints(1, KT_VALS(-1));
    y = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 0), NULL);
    fails += kiln_optest("Slice", "", 4, in, 1, &y, 0, 0, "slice start past the end");

    /* fuzz_run: a negative step over an empty axis took one element (read past the data) */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(0, 2), NULL);
    in[1] = ints(1, KT_VALS(-1));
    in[2] = ints(1, KT_VALS(-10));
    in[3] = ints(1, KT_VALS(0));
    in[4] = ints(1, KT_VALS(-1));
    y = kt_make(KILN_F32, 2, KT_DIMS(0, 2), NULL);
    fails += kiln_optest("Slice", "", 5, in, 1, &y, 0, 0, "slice negative step over an empty axis");

    in[0] = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(0, 1, 2, 3, 4)); /* x[::-INT64_MIN] */
    in[1] = ints(1, KT_VALS(-1));
    in[2] = ints(1, KT_VALS(-9223372036854775808.0));
    in[3] = NULL;
    in[4] = ints(1, KT_VALS(-1));
    y = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(4, 3, 2, 1, 0));
    fails += kiln_optest("Slice", "", 5, in, 1, &y, 0, 0, "slice reverse to INT64_MIN");

    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = ints(1, KT_VALS(0));
    in[2] = ints(1, KT_VALS(1));
    in[3] = ints(1, KT_VALS(0));
    in[4] = ints(1, KT_VALS(0));
    fails += kiln_optest_fails("Slice", "", 5, in, 1, KILN_ERR_SHAPE, "slice step 0");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = ints(2, KT_VALS(0, 0));
    in[2] = ints(1, KT_VALS(1));
    fails += kiln_optest_fails("Slice", "", 3, in, 1, KILN_ERR_SHAPE, "slice ends too short");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = ints(1, KT_VALS(0));
    in[2] = ints(1, KT_VALS(1));
    in[3] = ints(1, KT_VALS(3));
    fails += kiln_optest_fails("Slice", "", 4, in, 1, KILN_ERR_SHAPE, "slice axis 3");
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), v);
    in[1] = ints(2, KT_VALS(0, 0));
    in[2] = ints(2, KT_VALS(1, 1));
    in[3] = ints(2, KT_VALS(1, -2));
    fails += kiln_optest_fails("Slice", "", 4, in, 1, KILN_ERR_SHAPE, "slice repeated axis");

    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -1, 1, 1);
    in[1] = ints(2, KT_VALS(2, 0));
    in[2] = ints(2, KT_VALS(0, 1000000));
    in[3] = ints(2, KT_VALS(1, 2));
    in[4] = ints(2, KT_VALS(-1, 2));
    fails += kiln_gradcheck("Slice", "", 0, 5, in, NULL, "slice grad negative and even steps");
    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(3, 4, 2), -1, 1, 2);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(1, -10));
    in[2] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(3, 3));
    fails += kiln_gradcheck("Slice", "", 0, 3, in, NULL, "slice grad default axes, int32");
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(4, 7), -1, 1, 3);
    in[1] = ints(1, KT_VALS(-1));
    in[2] = ints(1, KT_VALS(-9223372036854775808.0));
    in[3] = ints(1, KT_VALS(-1));
    in[4] = ints(1, KT_VALS(-3));
    fails += kiln_gradcheck("Slice", "", 0, 5, in, NULL, "slice grad reversed by 3");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Slice", "", 0, 5,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 17, 19), -2, 2, 381),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, -18)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 19)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 3))},
                               1, "slice random axes 1,3 step 3");
    /* ShuffleNet's channel half, and one row band with a step, for the NHWC kernel */
    fails += kiln_optest_sweep("Slice", "", 0, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 16, 5, 7), -2, 2, 7301),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(8)),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(16)),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1))},
                               1, "slice 4-D channels 8..16");
    fails += kiln_optest_sweep("Slice", "", 0, 5,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 6, 9, 4), -2, 2, 7302),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 8)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(5, 0)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 2)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, -3))},
                               1, "slice 4-D channels step 2, rows reversed step 3");
    /* whole innermost rows, which CUDA moves in units of up to 16 bytes: NCHW rows of 4
     * f32, and (axes 2, 3 only) Swin's shifted-window bands, whole channel rows in NHWC */
    fails += kiln_optest_sweep("Slice", "", 0, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 8, 7, 4), -2, 2, 7303),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 1)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(8, 6)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 2))},
                               1, "slice whole rows of 16 bytes");
    fails += kiln_optest_sweep("Slice", "", 0, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 8, 7, 5), -2, 2, 7304),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 0)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(7, 3)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 3))},
                               1, "slice a band of rows and columns, channels whole");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Slice", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(5, 7), -2, 2, 1378),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 2)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(4, 6))},
                               1, "slice 2-D f32");
    fails += kiln_optest_sweep("Slice", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(5, 7), -2, 2, 1379),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 2)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(4, 6))},
                               1, "slice 2-D i64");
    fails += kiln_optest_sweep("Slice", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(5, 7), -2, 2, 1380),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(1, 2)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(4, 6))},
                               1, "slice 2-D u8");
    fails += kiln_optest_sweep("Slice", "", 0, 5,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 6, 5), -2, 2, 1381),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-1, 4)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-100, 0)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 1)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-2, -1))},
                               1, "slice negative steps and axes f32");
    fails += kiln_optest_sweep("Slice", "", 0, 5,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(4, 6, 5), -2, 2, 1382),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-1, 4)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-100, 0)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 1)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-2, -1))},
                               1, "slice negative steps and axes i64");
    fails += kiln_optest_sweep("Slice", "", 0, 5,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(4, 6, 5), -2, 2, 1383),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-1, 4)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-100, 0)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(2, 1)),
                                                kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(-2, -1))},
                               1, "slice negative steps and axes u8");
    fails += kiln_optest_sweep("Slice", "", 0, 5,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 4, 10), -2, 2, 1384),
                                                kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(1)),
                                                kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(1000)),
                                                kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(-1)),
                                                kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(3))},
                               1, "slice i32, end past the dim, step 3 f32");
    fails += kiln_optest_sweep("Slice", "", 0, 5,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(3, 4, 10), -2, 2, 1385),
                                                kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(1)),
                                                kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(1000)),
                                                kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(-1)),
                                                kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(3))},
                               1, "slice i32, end past the dim, step 3 i64");
    fails += kiln_optest_sweep("Slice", "", 0, 5,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(3, 4, 10), -2, 2, 1386),
                                                kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(1)),
                                                kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(1000)),
                                                kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(-1)),
                                                kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(3))},
                               1, "slice i32, end past the dim, step 3 u8");
    fails += kiln_optest_sweep("Slice", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(6, 8), -2, 2, 1387),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(2)),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(5))},
                               1, "slice inner contiguous block f32");
    fails += kiln_optest_sweep("Slice", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(6, 8), -2, 2, 1388),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(2)),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(5))},
                               1, "slice inner contiguous block i64");
    fails += kiln_optest_sweep("Slice", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(6, 8), -2, 2, 1389),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(2)),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(5))},
                               1, "slice inner contiguous block u8");
    fails += kiln_optest_sweep("Slice", "", 0, 4,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1390),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(3)),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1)),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0))},
                               1, "slice empty f32");
    fails += kiln_optest_sweep("Slice", "", 0, 4,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(4, 5), -2, 2, 1391),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(3)),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1)),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0))},
                               1, "slice empty i64");
    fails += kiln_optest_sweep("Slice", "", 0, 4,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(4, 5), -2, 2, 1392),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(3)),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(1)),
                                                kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(0))},
                               1, "slice empty u8");
    return fails;
}
#endif /* KILN_OPTESTS */

/* alias_when: the slice keeps every element in order (each axis whole, step 1: a crop to
 * a size the tensor already has), in one byte order. */
static bool keeps_all(const kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *y = c->out[0];
    if (x->ndim != y->ndim || x->format != y->format) return false;
    for (int k = 1; k < c->n_in; k++) /* the plan knows starts, ends, axes and steps */
        if (c->in[k] && !c->in[k]->data) return false;
    slice_plan p;
    if (plan((kiln_op_ctx *)c, 0, &p) != KILN_OK) return false;
    for (int d = 0; d < x->ndim; d++)
        if (y->dims[d] != x->dims[d] || (x->dims[d] > 1 && (p.start[d] != 0 || p.step[d] != 1))) return false;
    return true;
}

const kiln_op_def kiln_op_slice = {
    .precision = KILN_PREC_FOLLOW, .prec_flags = KILN_PREC_SHRINKS, .layout = KILN_LAYOUT_FOLLOW,
    .name = "Slice", .min_inputs = 1, .max_inputs = 5, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4), .infer = infer,
    .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test), .grad = grad,
    .alias_when = keeps_all,
};

const kiln_op_def kiln_op_slice_grad = {
    .precision = KILN_PREC_FP32,
    .name = "SliceGrad", .domain = "kiln", .min_inputs = 4, .max_inputs = 6, .min_outputs = 1,
    .max_outputs = 1, .value_inputs = (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5),
    .shape_only_inputs = 1u << 1, .infer = infer_grad, .cpu_forward = forward_grad,
    .cpu_workspace = workspace, .test = KILN_OP_TESTS(test_grad),
};
