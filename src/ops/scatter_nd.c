/* scatter_nd.c — ScatterND(data, indices, updates): a copy of data where, for each index
 * tuple (indices' last dim m <= rank of data, over indices' other dims), the element or
 * slice data[tuple] takes the matching slice of updates (updates.dims = indices.dims[:-1]
 * + data.dims[m:]). reduction (opset 16: none, add, mul; 18: max, min) combines instead.
 * Opsets 11, 13, 16, 18. Tuples apply in order, so with reduction none a repeated tuple
 * keeps the last update. int64 indices (int32 accepted); negative ones count from the
 * end; one out of range is an error at run time (KILN_ERR_INVALID_ARGUMENT), checked before
 * anything is written. Any data dtype (the reductions: numeric ones).
 *
 * Gradient (reduction none or add; swin_v2 zeroes part of a bias this way): dUpdates =
 * GatherND(dY, indices); dData = ScatterND(dY, indices, zeros like updates) for none (the
 * overwritten elements get nothing), dY for add. With none and a repeated index tuple,
 * every copy of the update gets the gradient (only the last one lands). */
#include "../core/optest.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

static int reduction_of(const kiln_node *n) {
    const char *r = kiln_attr_string(n, "reduction", "none");
    return strcmp(r, "none") == 0  ? RED_NONE
           : strcmp(r, "add") == 0 && n->opset >= 16 ? RED_ADD
           : strcmp(r, "mul") == 0 && n->opset >= 16 ? RED_MUL
           : strcmp(r, "max") == 0 && n->opset >= 18 ? RED_MAX
           : strcmp(r, "min") == 0 && n->opset >= 18 ? RED_MIN
                                                     : -1;
}

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1], *u = c->in[2];
    KILN_OP_CHECK(c, kiln_dtype_size(x->dtype) > 0, KILN_ERR_TYPE, "data dtype %s is not supported",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, ix->dtype == KILN_I64 || ix->dtype == KILN_I32, KILN_ERR_TYPE,
                  "indices must be int64 (or int32), got %s", kiln_dtype_name(ix->dtype));
    KILN_OP_CHECK(c, u->dtype == x->dtype, KILN_ERR_TYPE, "updates has dtype %s, data %s",
                  kiln_dtype_name(u->dtype), kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, x->ndim >= 1 && ix->ndim >= 1, KILN_ERR_SHAPE, "data and indices must have rank >= 1");
    const int64_t m = ix->dims[ix->ndim - 1];
    KILN_OP_CHECK(c, m >= 1 && m <= x->ndim, KILN_ERR_SHAPE,
                  "indices' last dim %" PRId64 " must be in [1, %d] (data's rank)", m, x->ndim);
    bool ok = u->ndim == ix->ndim - 1 + x->ndim - (int)m;
    for (int d = 0; ok && d < ix->ndim - 1; d++) ok = u->dims[d] == ix->dims[d];
    for (int d = 0; ok && d < x->ndim - m; d++) ok = u->dims[ix->ndim - 1 + d] == x->dims[m + d];
    KILN_OP_CHECK(c, ok, KILN_ERR_SHAPE, "updates must have dims indices.dims[:-1] + data.dims[%" PRId64 ":]", m);
    const int red = reduction_of(c->node);
    KILN_OP_CHECK(c, red >= 0, KILN_ERR_INVALID_ARGUMENT, "reduction='%s' is not supported in opset %d",
                  kiln_attr_string(c->node, "reduction", ""), c->node->opset);
    KILN_OP_CHECK(c, red == RED_NONE || kiln_dtype_is_float(x->dtype) || kiln_dtype_is_int(x->dtype),
                  KILN_ERR_TYPE, "reduction of dtype %s", kiln_dtype_name(x->dtype));
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *ix = c->in[1], *u = c->in[2];
    kiln_tensor *y = c->out[0];
    const int64_t m = ix->dims[ix->ndim - 1], tuples = kiln_tensor_numel(ix) / m;
    int64_t xs[KILN_MAX_DIMS];
    kiln_strides(x->ndim, x->dims, xs);
    const int64_t slice = xs[m - 1];
    for (int64_t i = 0; i < tuples * m; i++) {
        const int64_t v = kiln_get_i64(ix, i), dim = x->dims[i % m];
        KILN_OP_CHECK(c, v >= -dim && v < dim, KILN_ERR_INVALID_ARGUMENT,
                      "indices[%" PRId64 "] = %" PRId64 " is out of range [-%" PRId64 ", %" PRId64 ")", i, v, dim, dim);
    }
    memcpy(y->data, x->data, kiln_tensor_nbytes(y));
    const size_t es = kiln_dtype_size(x->dtype);
    const int red = reduction_of(c->node);
    const bool fl = kiln_dtype_is_float(x->dtype), uns = x->dtype == KILN_U64;
    for (int64_t t = 0; t < tuples; t++) {
        int64_t off = 0;
        for (int64_t k = 0; k < m; k++) {
            int64_t v = kiln_get_i64(ix, t * m + k);
            if (v < 0) v += x->dims[k];
            off += v * xs[k];
        }
        if (red == RED_NONE) {
            memcpy((char *)y->data + (size_t)off * es, (const char *)u->data + (size_t)(t * slice) * es,
                   (size_t)slice * es);
            continue;
        }
        for (int64_t j = 0; j < slice; j++) {
            const int64_t at = off + j, ui = t * slice + j;
            if (fl) {
                const double a = kiln_get_f64(y, at), b = kiln_get_f64(u, ui);
                kiln_set_f64(y, at, red == RED_ADD ? a + b : red == RED_MUL ? a * b
                                    : red == RED_MAX ? (a >= b || isnan(a) ? a : b) : (a <= b || isnan(a) ? a : b));
            } else {
                const int64_t a = kiln_get_i64(y, at), b = kiln_get_i64(u, ui);
                const bool gt = uns ? (uint64_t)b > (uint64_t)a : b > a;
                kiln_set_i64(y, at, red == RED_ADD ? (int64_t)((uint64_t)a + (uint64_t)b)
                                    : red == RED_MUL ? (int64_t)((uint64_t)a * (uint64_t)b)
                                    : red == RED_MAX ? (gt ? b : a) : (gt || a == b ? a : b));
            }
        }
    }
    return KILN_OK;
}

static kiln_status grad(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    const int red = reduction_of(n);
    if (red != RED_NONE && red != RED_ADD)
        return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                         "ScatterND node '%s': no gradient with reduction '%s' (none and add have one)", n->name,
                         kiln_attr_string(n, "reduction", "none"));
    if (g->need[2]) {
        int in[2] = {g->dy[0], KILN_GRAD_IN(g, 1)};
        g->dx[2] = kiln_grad_emit(g, NULL, "GatherND", 2, in, 1, NULL, false, NULL);
        if (g->dx[2] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    if (g->need[0]) {
        if (red == RED_ADD) {
            g->dx[0] = g->dy[0];
            return KILN_OK;
        }
        /* zeros shaped like updates, in its dtype (the three nodes fold) */
        int like = KILN_GRAD_IN(g, 2);
        int shape = kiln_grad_emit(g, NULL, "Shape", 1, &like, 1, NULL, false, NULL);
        int zeros = shape < 0 ? -1 : kiln_grad_emit(g, NULL, "ConstantOfShape", 1, &shape, 1, NULL, false, NULL);
        int cl[2] = {zeros, like};
        int z = zeros < 0 ? -1 : kiln_grad_emit(g, NULL, "CastLike", 2, cl, 1, NULL, false, NULL);
        int in[3] = {g->dy[0], KILN_GRAD_IN(g, 1), z};
        g->dx[0] = z < 0 ? -1 : kiln_grad_emit(g, NULL, "ScatterND", 3, in, 1, NULL, false, NULL);
        if (g->dx[0] < 0) return KILN_ERR_OUT_OF_MEMORY;
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *y;
    const double d8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    /* the ONNX spec's examples */
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(8), d8);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(4, 1), KT_VALS(4, 3, 1, 7));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(4), KT_VALS(9, 10, 11, 12));
    y = kt_make(KILN_F32, 1, KT_DIMS(8), KT_VALS(1, 11, 3, 10, 9, 6, 7, 12));
    fails += kiln_optest("ScatterND", "", 3, in, 1, &y, 0, 0, "scatter_nd elements");
    in[0] = kt_make(KILN_I32, 2, KT_DIMS(2, 4), d8);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 1), KT_VALS(-1));
    in[2] = kt_make(KILN_I32, 2, KT_DIMS(1, 4), KT_VALS(-1, -2, -3, -4));
    y = kt_make(KILN_I32, 2, KT_DIMS(2, 4), KT_VALS(1, 2, 3, 4, -1, -2, -3, -4));
    fails += kiln_optest("ScatterND", "", 3, in, 1, &y, 0, 0, "scatter_nd row slice, negative index");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(8), d8);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(0, 0));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(5, 6));
    y = kt_make(KILN_F32, 1, KT_DIMS(8), KT_VALS(12, 2, 3, 4, 5, 6, 7, 8));
    fails += kiln_optest("ScatterND", "reduction=add", 3, in, 1, &y, 0, 0, "scatter_nd add, repeated");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(8), d8);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(0, 0));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(2), KT_VALS(5, 6));
    y = kt_make(KILN_F32, 1, KT_DIMS(8), KT_VALS(30, 2, 3, 4, 5, 6, 7, 8));
    fails += kiln_optest("ScatterND", "reduction=mul", 3, in, 1, &y, 0, 0, "scatter_nd mul, repeated");
    in[0] = kt_make(KILN_I64, 1, KT_DIMS(8), d8);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 1), KT_VALS(1, 2));
    in[2] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(5, 1));
    y = kt_make(KILN_I64, 1, KT_DIMS(8), KT_VALS(1, 5, 3, 4, 5, 6, 7, 8));
    fails += kiln_optest("ScatterND", "reduction=max", 3, in, 1, &y, 0, 0, "scatter_nd max i64");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(8), d8);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(1, 1), KT_VALS(8));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(1), NULL);
    fails += kiln_optest_fails("ScatterND", "", 3, in, 1, KILN_ERR_INVALID_ARGUMENT, "scatter_nd index out of range");
    in[0] = kt_make(KILN_F32, 1, KT_DIMS(8), d8);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 1), NULL);
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("ScatterND", "", 3, in, 1, KILN_ERR_SHAPE, "scatter_nd updates shape");
    fails += kiln_optest_sweep("ScatterND", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(5, 6, 7), -3, 3, 6401),
                                                 kt_rand(KILN_I64, 2, KT_DIMS(4, 2), 0, 5, 6402),
                                                 kt_rand(KILN_F32, 2, KT_DIMS(4, 7), -3, 3, 6403)},
                               1, "scatter_nd random slices");
    /* gradients (distinct index tuples: a repeated one has no derivative for its lost update) */
    fails += kiln_gradcheck("ScatterND", "", 0, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(4, 3, 2), -1, 1, 6404),
                                              kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, 0)),
                                              kt_rand(KILN_F64, 2, KT_DIMS(2, 2), -1, 1, 6405)},
                            NULL, "scatter_nd grad slices");
    fails += kiln_gradcheck("ScatterND", "reduction=add", 16, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 1, KT_DIMS(6), -1, 1, 6406),
                                              kt_make(KILN_I64, 2, KT_DIMS(3, 1), KT_VALS(4, 0, 4)),
                                              kt_rand(KILN_F64, 1, KT_DIMS(3), -1, 1, 6407)},
                            NULL, "scatter_nd grad add, a repeated index");
    /* swin_v2's form: a bias whose middle third is zeroed (updates a constant) */
    fails += kiln_gradcheck("ScatterND", "", 0, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 1, KT_DIMS(9), -1, 1, 6408),
                                              kt_make(KILN_I64, 2, KT_DIMS(3, 1), KT_VALS(3, 4, 5)),
                                              kt_make(KILN_F64, 1, KT_DIMS(3), NULL)},
                            (const bool[]){true, false, false}, "scatter_nd grad data only (swin_v2's bias)");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_scatter_nd = {
    .precision = KILN_PREC_FOLLOW,
    .name = "ScatterND", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};
