/* scatter_elements.c — ScatterElements(data, indices, updates) and its predecessor Scatter
 * (opsets 9, 10): a copy of data where, for each position p of indices (and updates, of
 * the same shape and data's rank), the element at p with dim `axis` replaced by
 * indices[p] takes updates[p]. Opsets 11, 13; reduction (opset 16: none, add, mul; 18:
 * max, min) combines it with the element there instead. Updates apply in row-major order
 * of indices, so with reduction none a repeated index keeps the last update. Negative
 * indices count from the end; one outside [-dim, dim) is an error at run time
 * (KILN_ERR_INVALID_ARGUMENT), checked before anything is written. Any data dtype (the
 * reductions: numeric ones). */
#include "../core/optest.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

static int reduction_of(const kiln_node *n) {
    const char *r = kiln_attr_string(n, "reduction", "none");
    return strcmp(r, "none") == 0  ? RED_NONE
           : strcmp(r, "add") == 0 ? RED_ADD
           : strcmp(r, "mul") == 0 ? RED_MUL
           : strcmp(r, "max") == 0 && n->opset >= 18 ? RED_MAX
           : strcmp(r, "min") == 0 && n->opset >= 18 ? RED_MIN
                                                     : -1;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1], *u = c->in[2];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "data dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, ix->dtype == KILN_I32 || ix->dtype == KILN_I64, KILN_ERR_TYPE,
                  "indices must be int32 or int64, got %s", kiln_dtype_name(ix->dtype));
    KILN_OP_CHECK(c, u->dtype == x->dtype, KILN_ERR_TYPE, "updates has dtype %s, data %s",
                  kiln_dtype_name(u->dtype), kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 1 && ix->ndim == x->ndim, KILN_ERR_SHAPE,
                  "indices has rank %d, data rank %d (they must agree, >= 1)", ix->ndim, x->ndim);
    bool same = u->ndim == ix->ndim;
    for (int d = 0; same && d < ix->ndim; d++) same = u->dims[d] == ix->dims[d];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "updates must have indices' shape");
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    KILN_OP_CHECK(c, kiln_norm_axis(&axis, x->ndim), KILN_ERR_SHAPE, "axis %" PRId64 " is out of range for rank %d",
                  kiln_attr_int(c->node, "axis", 0), x->ndim);
    for (int d = 0; d < x->ndim; d++)
        KILN_OP_CHECK(c, d == axis || ix->dims[d] <= x->dims[d], KILN_ERR_SHAPE,
                      "indices dim %d is %" PRId64 ", larger than data's %" PRId64, d, ix->dims[d], x->dims[d]);
    const int red = reduction_of(c->node);
    KILN_OP_CHECK(c, red >= 0, KILN_ERR_INVALID_ARGUMENT, "reduction='%s' is not one of none, add, mul%s",
                  kiln_attr_string(c->node, "reduction", ""), c->node->opset >= 18 ? ", max, min" : "");
    KILN_OP_CHECK(c, red == RED_NONE || c->node->opset >= 16, KILN_ERR_INVALID_ARGUMENT,
                  "attribute reduction exists from opset 16 on");
    KILN_OP_CHECK(c, red == RED_NONE || kiln_dtype_is_float(x->dtype) || kiln_dtype_is_int(x->dtype),
                  KILN_ERR_TYPE, "reduction of dtype %s", kiln_dtype_name(x->dtype));
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1], *u = c->in[2];
    kiln_tensor *y = c->out[0];
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    kiln_norm_axis(&axis, x->ndim);
    const int64_t n = kiln_tensor_numel(ix), dim = x->dims[axis];
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = kiln_get_i64(ix, i);
        KILN_OP_CHECK(c, v >= -dim && v < dim, KILN_ERR_INVALID_ARGUMENT,
                      "indices[%" PRId64 "] = %" PRId64 " is out of range [-%" PRId64 ", %" PRId64 ") of axis %" PRId64,
                      i, v, dim, dim, axis);
    }
    memcpy(y->data, x->data, kiln_tensor_nbytes(y));
    int64_t xs[KILN_MAX_DIMS];
    kiln_strides(x->ndim, x->dims, xs);
    const size_t es = kiln_dtype_size(x->dtype);
    const int red = reduction_of(c->node);
    const bool fl = kiln_dtype_is_float(x->dtype), uns = x->dtype == KILN_U64;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = kiln_get_i64(ix, i);
        if (v < 0) v += dim;
        int64_t rem = i, off = 0;
        for (int d = ix->ndim - 1; d >= 0; d--) {
            const int64_t coord = rem % ix->dims[d];
            rem /= ix->dims[d];
            off += (d == axis ? v : coord) * xs[d];
        }
        if (red == RED_NONE) {
            memcpy((char *)y->data + (size_t)off * es, (const char *)u->data + (size_t)i * es, es);
        } else if (fl) {
            const double a = kiln_get_f64(y, off), b = kiln_get_f64(u, i);
            kiln_set_f64(y, off, red == RED_ADD ? a + b : red == RED_MUL ? a * b
                                 : red == RED_MAX ? (a >= b || isnan(a) ? a : b) : (a <= b || isnan(a) ? a : b));
        } else {
            const int64_t a = kiln_get_i64(y, off), b = kiln_get_i64(u, i);
            const bool gt = uns ? (uint64_t)b > (uint64_t)a : b > a;
            kiln_set_i64(y, off, red == RED_ADD ? (int64_t)((uint64_t)a + (uint64_t)b)
                                 : red == RED_MUL ? (int64_t)((uint64_t)a * (uint64_t)b)
                                 : red == RED_MAX ? (gt ? b : a) : (gt || a == b ? a : b));
        }
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test_op(const char *op) {
    int fails = 0;
    kiln_tensor *in[3], *y;
    /* the ONNX spec's examples */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(3, 3), NULL);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(1, 0, 2, 0, 2, 1));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 1.1, 1.2, 2, 2.1, 2.2));
    y = kt_make(KILN_F32, 2, KT_DIMS(3, 3), KT_VALS(2, 1.1, 0, 1, 0, 2.2, 0, 2.1, 1.2));
    fails += kiln_optest(op, "", 3, in, 1, &y, 0, 0, "scatter axis 0");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(1, 5), KT_VALS(1, 2, 3, 4, 5));
    in[1] = kt_make(KILN_I32, 2, KT_DIMS(1, 2), KT_VALS(1, -2));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(1, 2), KT_VALS(1.1, 2.1));
    y = kt_make(KILN_F32, 2, KT_DIMS(1, 5), KT_VALS(1, 1.1, 3, 2.1, 5));
    fails += kiln_optest(op, "axis=1", 3, in, 1, &y, 0, 0, "scatter axis 1, negative index");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 1), KT_VALS(2));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(1, 1), NULL);
    fails += kiln_optest_fails(op, "", 3, in, 1, KILN_ERR_INVALID_ARGUMENT, "scatter index out of range");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 2), NULL);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 1), NULL);
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(1, 2), NULL);
    fails += kiln_optest_fails(op, "", 3, in, 1, KILN_ERR_SHAPE, "scatter updates shape");
    return fails;
}

static int test(void) {
    int fails = test_op("ScatterElements");
    kiln_tensor *in[3], *y;
    /* reductions: two updates land on index 1 */
    const double d[5] = {1, 2, 3, 4, 5};
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(1, 5), d);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 2), KT_VALS(1, 1));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(1, 2), KT_VALS(1.1, 2.1));
    y = kt_make(KILN_F32, 2, KT_DIMS(1, 5), KT_VALS(1, 5.2, 3, 4, 5));
    fails += kiln_optest("ScatterElements", "axis=1;reduction=add", 3, in, 1, &y, 1e-6, 1e-6, "scatter add");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(1, 5), d);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 2), KT_VALS(1, 1));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(1, 2), KT_VALS(1.1, 2.1));
    y = kt_make(KILN_F32, 2, KT_DIMS(1, 5), KT_VALS(1, 4.62, 3, 4, 5));
    fails += kiln_optest("ScatterElements", "axis=1;reduction=mul", 3, in, 1, &y, 1e-6, 1e-6, "scatter mul");
    in[0] = kt_make(KILN_I32, 2, KT_DIMS(1, 5), d);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 3), KT_VALS(1, 1, 4));
    in[2] = kt_make(KILN_I32, 2, KT_DIMS(1, 3), KT_VALS(7, -3, 2));
    y = kt_make(KILN_I32, 2, KT_DIMS(1, 5), KT_VALS(1, 7, 3, 4, 5));
    fails += kiln_optest("ScatterElements", "axis=1;reduction=max", 3, in, 1, &y, 0, 0, "scatter max i32");
    in[0] = kt_make(KILN_I32, 2, KT_DIMS(1, 5), d);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 3), KT_VALS(1, 1, 4));
    in[2] = kt_make(KILN_I32, 2, KT_DIMS(1, 3), KT_VALS(7, -3, 2));
    y = kt_make(KILN_I32, 2, KT_DIMS(1, 5), KT_VALS(1, -3, 3, 4, 2));
    fails += kiln_optest("ScatterElements", "axis=1;reduction=min", 3, in, 1, &y, 0, 0, "scatter min i32");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(1, 5), d);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 2), KT_VALS(1, 1));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(1, 2), NULL);
    fails += kiln_optest_fails("ScatterElements", "reduction=sub", 3, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "scatter reduction=sub");
    fails += kiln_optest_sweep("ScatterElements", "axis=1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 17, 5), -3, 3, 6201),
                                                 kt_rand(KILN_I64, 3, KT_DIMS(3, 9, 5), -17, 17, 6202),
                                                 kt_rand(KILN_F32, 3, KT_DIMS(3, 9, 5), -3, 3, 6203)},
                               1, "scatter_elements random axis 1");
    fails += kiln_optest_sweep("ScatterElements", "axis=0;reduction=add", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(7, 6), -3, 3, 6204),
                                                 kt_rand(KILN_I64, 2, KT_DIMS(20, 6), 0, 7, 6205),
                                                 kt_rand(KILN_F32, 2, KT_DIMS(20, 6), -3, 3, 6206)},
                               1, "scatter_elements random add, repeated indices");
    return fails;
}

static int test_scatter(void) { return test_op("Scatter"); }
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_scatter_elements = {
    .precision = KILN_PREC_FOLLOW,
    .name = "ScatterElements", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test),
};

const kiln_op_def kiln_op_scatter = {
    .precision = KILN_PREC_FOLLOW,
    .name = "Scatter", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test_scatter),
};
