/* top_k.c — TopK(X, K) -> (Values, Indices): the k largest (largest=1, the default) or
 * smallest elements along `axis` (default -1) with their int64 indices, sorted (ties: the
 * lower index first; NaN counts as larger than every number). Opset 1: k is an attribute;
 * opsets 10, 11: K is an int64 tensor of one element, read when the plan is built (it is
 * the outputs' size); opset 11 adds largest and sorted (kiln always sorts, which sorted=0
 * allows). Float and integer dtypes; values are compared as double. */
#include "../core/optest.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

typedef struct entry {
    double v;
    int64_t i;
} entry;

/* largest first; NaN first; ties by index */
static int cmp_largest(const void *pa, const void *pb) {
    const entry *a = pa, *b = pb;
    const bool na = isnan(a->v), nb = isnan(b->v);
    if (na != nb) return na ? -1 : 1;
    if (!na && a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

/* smallest first; NaN last; ties by index */
static int cmp_smallest(const void *pa, const void *pb) {
    const entry *a = pa, *b = pb;
    const bool na = isnan(a->v), nb = isnan(b->v);
    if (na != nb) return na ? 1 : -1;
    if (!na && a->v != b->v) return a->v < b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static kiln_status k_of(kiln_op_ctx *c, int64_t *k) {
    if (c->node->opset < 10) {
        KILN_OP_CHECK(c, kiln_node_attr(c->node, "k") != NULL, KILN_ERR_INVALID_ARGUMENT,
                      "attribute 'k' is required before opset 10");
        *k = kiln_attr_int(c->node, "k", 0);
        return KILN_OK;
    }
    KILN_OP_CHECK(c, c->n_in > 1 && c->in[1], KILN_ERR_INVALID_ARGUMENT, "input K is required from opset 10 on");
    const kiln_tensor *t = c->in[1];
    KILN_OP_CHECK(c, t->dtype == KILN_I64 && kiln_tensor_numel(t) == 1 && t->ndim <= 1, KILN_ERR_TYPE,
                  "K must be an int64 tensor of one element");
    KILN_OP_CHECK(c, t->data != NULL, KILN_ERR_UNSUPPORTED, "K must be known when the plan is built");
    *k = kiln_get_i64(t, 0);
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype) || kiln_dtype_is_int(x->dtype), KILN_ERR_TYPE,
                  "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 1, KILN_ERR_SHAPE, "input must have rank >= 1");
    int64_t axis = kiln_attr_int(c->node, "axis", -1), k = 0;
    KILN_OP_CHECK(c, kiln_norm_axis(&axis, x->ndim), KILN_ERR_SHAPE, "axis=%" PRId64 " is out of range for rank %d",
                  kiln_attr_int(c->node, "axis", -1), x->ndim);
    kiln_status st = k_of(c, &k);
    if (st) return st;
    KILN_OP_CHECK(c, k >= 0 && k <= x->dims[axis], KILN_ERR_INVALID_ARGUMENT,
                  "k = %" PRId64 " must be in [0, %" PRId64 "] (the axis' size)", k, x->dims[axis]);
    int64_t dims[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) dims[d] = d == axis ? k : x->dims[d];
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, dims);
    if (c->n_out > 1 && c->out[1]) kiln_tensor_set_shape(c->out[1], KILN_I64, x->ndim, dims);
    return KILN_OK;
}

static size_t workspace(const kiln_op_ctx *c) {
    int64_t axis = kiln_attr_int(c->node, "axis", -1);
    kiln_norm_axis(&axis, c->in[0]->ndim);
    return (size_t)c->in[0]->dims[axis] * sizeof(entry);
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *yv = c->out[0], *yi = c->n_out > 1 ? c->out[1] : NULL;
    int64_t axis = kiln_attr_int(c->node, "axis", -1);
    kiln_norm_axis(&axis, x->ndim);
    const int64_t n = x->dims[axis], k = yv->dims[axis];
    const bool largest = c->node->opset < 11 || kiln_attr_int(c->node, "largest", 1) != 0;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = (int)axis + 1; d < x->ndim; d++) inner *= x->dims[d];
    entry *e = c->workspace; // (n)
    const bool fl = kiln_dtype_is_float(x->dtype);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            for (int64_t j = 0; j < n; j++) {
                const int64_t at = (o * n + j) * inner + i;
                e[j].v = fl ? kiln_get_f64(x, at)
                            : x->dtype == KILN_U64 ? (double)(uint64_t)kiln_get_i64(x, at) : (double)kiln_get_i64(x, at);
                e[j].i = j;
            }
            if (n > 0) qsort(e, (size_t)n, sizeof *e, largest ? cmp_largest : cmp_smallest);
            for (int64_t j = 0; j < k; j++) {
                const int64_t out = (o * k + j) * inner + i, src = (o * n + e[j].i) * inner + i;
                if (fl) kiln_set_f64(yv, out, kiln_get_f64(x, src));
                else kiln_set_i64(yv, out, kiln_get_i64(x, src));
                if (yi) ((int64_t *)yi->data)[out] = e[j].i;
            }
        }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[2], *y[2];
    const double x12[12] = {0, 1, 2, 3, 4, 5, 6, 7, 11, 10, 9, 8};
    /* the ONNX spec's examples */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), x12);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(3));
    y[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 3), KT_VALS(3, 2, 1, 7, 6, 5, 11, 10, 9));
    y[1] = kt_make(KILN_I64, 2, KT_DIMS(3, 3), KT_VALS(3, 2, 1, 3, 2, 1, 0, 1, 2));
    fails += kiln_optest("TopK", "axis=1", 2, in, 2, y, 0, 0, "top_k largest");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), x12);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(3));
    y[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 3), KT_VALS(0, 1, 2, 4, 5, 6, 8, 9, 10));
    y[1] = kt_make(KILN_I64, 2, KT_DIMS(3, 3), KT_VALS(0, 1, 2, 0, 1, 2, 3, 2, 1));
    fails += kiln_optest("TopK", "axis=1;largest=0;sorted=1", 2, in, 2, y, 0, 0, "top_k smallest");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), x12);
    y[0] = kt_make(KILN_F32, 2, KT_DIMS(1, 4), KT_VALS(11, 10, 9, 8));
    y[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 4), KT_VALS(2, 2, 2, 2));
    fails += kiln_optest_opset("TopK", "k=1;axis=0", 1, 1, in, 2, y, 0, 0, "top_k opset 1 k attribute, axis 0");
    /* ties go to the lower index; NaN counts as the largest */
    in[0] = kt_make(KILN_F64, 1, KT_DIMS(5), KT_VALS(2, NAN, 2, -1, 5));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(4));
    y[0] = kt_make(KILN_F64, 1, KT_DIMS(4), KT_VALS(NAN, 5, 2, 2));
    y[1] = kt_make(KILN_I64, 1, KT_DIMS(4), KT_VALS(1, 4, 0, 2));
    fails += kiln_optest("TopK", "", 2, in, 2, y, 0, 0, "top_k ties and NaN");
    in[0] = kt_make(KILN_I32, 1, KT_DIMS(5), KT_VALS(2, 7, 2, -1, 5));
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(2));
    y[0] = kt_make(KILN_I32, 1, KT_DIMS(2), KT_VALS(-1, 2));
    y[1] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(3, 0));
    fails += kiln_optest("TopK", "largest=0", 2, in, 2, y, 0, 0, "top_k smallest i32");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), x12);
    in[1] = kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(5));
    fails += kiln_optest_fails("TopK", "", 2, in, 2, KILN_ERR_INVALID_ARGUMENT, "top_k k above the axis");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), x12);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(1), KT_VALS(2));
    fails += kiln_optest_fails("TopK", "", 2, in, 2, KILN_ERR_TYPE, "top_k K of int32");
    fails += kiln_optest_sweep("TopK", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(4, 37, 5), -3, 3, 6501),
                                                 kt_make(KILN_I64, 1, KT_DIMS(1), KT_VALS(7))},
                               2, "top_k random axis 1");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_top_k = {
    .precision = KILN_PREC_FOLLOW, .out_dtype = {KILN_DT_IN0, KILN_DT_I64},
    .name = "TopK", .min_inputs = 1, .max_inputs = 2, .min_outputs = 2, .max_outputs = 2,
    .value_inputs = 1u << 1, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace,
    .test = KILN_OP_TESTS(test),
};
