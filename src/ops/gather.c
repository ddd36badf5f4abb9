/* gather.c — Gather: picks slices of data along `axis` (default 0, may be negative) by
 * int32 or int64 indices (opsets 11..21). Output shape: data.shape[:axis] + indices.shape
 * + data.shape[axis+1:]. Negative indices count from the end; an index outside
 * [-dim, dim) is an error at run time (KILN_ERR_INVALID_ARGUMENT), checked before any
 * output is written. Any data dtype.
 *
 * Gradient w.r.t. data: kiln.GatherGrad(dY, data, indices) (attribute axis) adds each
 * slice of dY into dData at its index, so repeated indices accumulate; data is read
 * shape-only. Float dtypes: f32 and f64 accumulate in place, f16/bf16 in doubles. */
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

/* Every index within [-dim, dim) of the axis, before anything is written. */
static kiln_status check_indices(kiln_op_ctx *c, const kiln_tensor *ix, int64_t dim,
                                 int64_t axis) {
    const int64_t *i64 = ix->dtype == KILN_I64 ? ix->data : NULL;
    const int32_t *i32 = ix->dtype == KILN_I32 ? ix->data : NULL;
    for (int64_t k = 0; k < kiln_tensor_numel(ix); k++) {
        int64_t i = i64 ? i64[k] : i32[k];
        KILN_OP_CHECK(c, i >= -dim && i < dim, KILN_ERR_INVALID_ARGUMENT,
                      "indices[%" PRId64 "] = %" PRId64 " is out of range [-%" PRId64
                      ", %" PRId64 ") of axis %" PRId64,
                      k, i, dim, dim, axis);
    }
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
    kiln_status st = check_indices(c, ix, dim, axis);
    if (st != KILN_OK) return st;
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

/* ---------------------------------------------------------------- gradient */

static kiln_status grad(kiln_grad_ctx *g) {
    kiln_status st = kiln_grad_refuse(g, 1, "indices");
    if (st != KILN_OK || !g->need[0]) return st;
    int in[3] = {g->dy[0], KILN_GRAD_IN(g, 0), KILN_GRAD_IN(g, 1)};
    g->dx[0] = kiln_grad_emit(g, "kiln", "GatherGrad", 3, in, 1, NULL, true, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *x = c->in[1];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "data must be a float tensor, not %s", kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, dy->dtype == x->dtype, KILN_ERR_TYPE, "dY has dtype %s, data has %s",
                  kiln_dtype_name(dy->dtype), kiln_dtype_name(x->dtype));
    /* the forward's inference on (data, indices) gives the shape dY must have */
    kiln_tensor fwd_out = {0}, *fwd_outp = &fwd_out;
    kiln_op_ctx f = *c;
    f.in = c->in + 1;
    f.n_in = 2;
    f.out = &fwd_outp;
    f.n_out = 1;
    kiln_status st = infer(&f);
    if (st != KILN_OK) return st;
    bool same = dy->ndim == fwd_out.ndim;
    for (int d = 0; same && d < dy->ndim; d++) same = dy->dims[d] == fwd_out.dims[d];
    char want[160];
    KILN_OP_CHECK(c, same, KILN_ERR_SHAPE, "dY must have the gather's shape %s",
                  kiln_dims_str(fwd_out.ndim, fwd_out.dims, want, sizeof want));
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static size_t workspace_grad(const kiln_op_ctx *c) { return kiln_scatter_add_bytes(c->out[0]); }

static kiln_status forward_grad(kiln_op_ctx *c) {
    const kiln_tensor *dy = c->in[0], *ix = c->in[2];
    kiln_tensor *dx = c->out[0];
    int64_t axis = kiln_attr_int(c->node, "axis", 0);
    kiln_norm_axis(&axis, dx->ndim);
    int64_t dim = dx->dims[axis], n = kiln_tensor_numel(ix), nx = kiln_tensor_numel(dx);
    kiln_status st = check_indices(c, ix, dim, axis);
    if (st != KILN_OK) return st;
    if (nx == 0) return KILN_OK;
    const int64_t *i64 = ix->dtype == KILN_I64 ? ix->data : NULL;
    const int32_t *i32 = ix->dtype == KILN_I32 ? ix->data : NULL;
    float *af = dx->dtype == KILN_F32 ? dx->data : NULL; // (outer, dim, inner)
    double *ad = af ? NULL : dx->dtype == KILN_F64 ? dx->data : c->workspace;
    if (af) memset(af, 0, (size_t)nx * sizeof *af);
    else memset(ad, 0, (size_t)nx * sizeof *ad);
    /* dY viewed as (outer, n, inner); rows of different `outer` never meet, so threads
     * split that axis */
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= dx->dims[d];
    for (int d = (int)axis + 1; d < dx->ndim; d++) inner *= dx->dims[d];
#pragma omp parallel for if (outer > 1 && outer * n * inner > (1 << 16))
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < n; k++) {
            int64_t i = i64 ? i64[k] : i32[k];
            if (i < 0) i += dim;
            int64_t to = (o * dim + i) * inner, from = (o * n + k) * inner;
            if (af) {
                const float *s = (const float *)dy->data + from;
                for (int64_t t = 0; t < inner; t++) af[to + t] += s[t];
            } else if (dy->dtype == KILN_F64) {
                const double *s = (const double *)dy->data + from;
                for (int64_t t = 0; t < inner; t++) ad[to + t] += s[t];
            } else {
                for (int64_t t = 0; t < inner; t++) ad[to + t] += kiln_get_f64(dy, from + t);
            }
        }
    if (ad && ad != dx->data)
        for (int64_t i = 0; i < nx; i++) kiln_set_f64(dx, i, ad[i]);
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test_grad(void) {
    int fails = 0;
    /* random, for the CUDA sweep: repeated and negative indices (adds that meet) */
    fails += kiln_optest_sweep("GatherGrad", "axis=1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(3, 2, 3, 5), -1, 1, 911),
                                                 kt_make(KILN_F32, 3, KT_DIMS(3, 6, 5), NULL),
                                                 kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(0, 5, 2, 2, -1, 0))},
                               1, "gather grad random, repeated indices");
    fails += kiln_optest_sweep("GatherGrad", "", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(40, 33), -1, 1, 912),
                                                 kt_make(KILN_F32, 2, KT_DIMS(7, 33), NULL),
                                                 kt_rand(KILN_I32, 1, KT_DIMS(40), 0, 6.99, 913)},
                               1, "gather grad random rows, int32 indices");
    kiln_tensor *in[3], *want;
    /* expected values from numpy: dx = zeros(data.shape); np.add.at(dx, indices, dY) */
    in[0] = kt_make(KILN_F32, 3, KT_DIMS(2, 2, 4),
                    KT_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16));
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), NULL);
    in[2] = kt_make(KILN_I64, 2, KT_DIMS(2, 2), KT_VALS(0, 2, -1, 0));
    want = kt_make(KILN_F32, 2, KT_DIMS(3, 4), KT_VALS(14, 16, 18, 20, 0, 0, 0, 0, 14, 16, 18, 20));
    fails += kiln_optest("GatherGrad", "", 3, in, 1, &want, 0, 0,
                         "gather grad axis 0, repeated indices");

    in[0] = kt_make(KILN_F16, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 3, 4, 5, 6));
    in[1] = kt_make(KILN_F16, 2, KT_DIMS(2, 4), NULL);
    in[2] = kt_make(KILN_I32, 1, KT_DIMS(3), KT_VALS(3, -1, 1));
    want = kt_make(KILN_F16, 2, KT_DIMS(2, 4), KT_VALS(0, 3, 0, 3, 0, 6, 0, 9));
    fails += kiln_optest("GatherGrad", "axis=1", 3, in, 1, &want, 0, 0,
                         "gather grad axis 1 f16, int32 indices, -1 repeats 3");

    in[0] = kt_make(KILN_F32, 1, KT_DIMS(2), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), NULL);
    in[2] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 3));
    fails += kiln_optest_fails("GatherGrad", "", 3, in, 1, KILN_ERR_SHAPE,
                               "gather grad dY of the wrong shape");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 4), NULL);
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(3, 4), NULL);
    in[2] = kt_make(KILN_I64, 1, KT_DIMS(2), KT_VALS(0, 3));
    fails += kiln_optest_fails("GatherGrad", "", 3, in, 1, KILN_ERR_INVALID_ARGUMENT,
                               "gather grad index 3 of 3");
    return fails;
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

    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(4, 3), -1, 1, 1);
    in[1] = kt_make(KILN_I64, 2, KT_DIMS(2, 3), KT_VALS(0, 2, -1, 2, 2, 0));
    fails += kiln_gradcheck("Gather", "", 0, 2, in, NULL, "gather grad axis 0, repeated indices");
    in[0] = kt_rand(KILN_F64, 3, KT_DIMS(2, 5, 3), -1, 1, 2);
    in[1] = kt_make(KILN_I32, 1, KT_DIMS(4), KT_VALS(4, -5, 1, 4));
    fails += kiln_gradcheck("Gather", "axis=1", 0, 2, in, NULL, "gather grad axis 1, int32");
    in[0] = kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 3);
    in[1] = kt_scalar(KILN_I64, -2);
    fails += kiln_gradcheck("Gather", "axis=-1", 0, 2, in, NULL, "gather grad scalar index");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Gather", "axis=0", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(37, 19), -2, 2, 331),
                                                kt_rand(KILN_I64, 2, KT_DIMS(5, 3), -37, 37, 332)},
                               1, "gather random rows, negative indices");
    fails += kiln_optest_sweep("Gather", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 17, 19), -2, 2, 333),
                                                kt_rand(KILN_I64, 1, KT_DIMS(7), 0, 17, 334)},
                               1, "gather random axis 1");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("Gather", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(5, 4, 3), -2, 2, 1354),
                                                kt_rand(KILN_I64, 2, KT_DIMS(2, 3), -5, 5, 1355)},
                               1, "gather axis 0, i64 indices f32");
    fails += kiln_optest_sweep("Gather", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(5, 4, 3), -2, 2, 1356),
                                                kt_rand(KILN_I64, 2, KT_DIMS(2, 3), -5, 5, 1357)},
                               1, "gather axis 0, i64 indices i64");
    fails += kiln_optest_sweep("Gather", "", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(5, 4, 3), -2, 2, 1358),
                                                kt_rand(KILN_I64, 2, KT_DIMS(2, 3), -5, 5, 1359)},
                               1, "gather axis 0, i64 indices u8");
    fails += kiln_optest_sweep("Gather", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(5, 4, 3), -2, 2, 1360),
                                                kt_rand(KILN_I32, 1, KT_DIMS(7), -4, 4, 1361)},
                               1, "gather axis 1, i32 indices f32");
    fails += kiln_optest_sweep("Gather", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(5, 4, 3), -2, 2, 1362),
                                                kt_rand(KILN_I32, 1, KT_DIMS(7), -4, 4, 1363)},
                               1, "gather axis 1, i32 indices i64");
    fails += kiln_optest_sweep("Gather", "axis=1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(5, 4, 3), -2, 2, 1364),
                                                kt_rand(KILN_I32, 1, KT_DIMS(7), -4, 4, 1365)},
                               1, "gather axis 1, i32 indices u8");
    fails += kiln_optest_sweep("Gather", "axis=2", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(5, 4, 3), -2, 2, 1366),
                                                kt_rand(KILN_I64, 0, NULL, -3, 3, 1367)},
                               1, "gather scalar index f32");
    fails += kiln_optest_sweep("Gather", "axis=2", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 3, KT_DIMS(5, 4, 3), -2, 2, 1368),
                                                kt_rand(KILN_I64, 0, NULL, -3, 3, 1369)},
                               1, "gather scalar index i64");
    fails += kiln_optest_sweep("Gather", "axis=2", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 3, KT_DIMS(5, 4, 3), -2, 2, 1370),
                                                kt_rand(KILN_I64, 0, NULL, -3, 3, 1371)},
                               1, "gather scalar index u8");
    fails += kiln_optest_sweep("Gather", "axis=-1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(2, 9), -2, 2, 1372),
                                                kt_rand(KILN_I64, 2, KT_DIMS(4, 2), 0, 9, 1373)},
                               1, "gather last axis f32");
    fails += kiln_optest_sweep("Gather", "axis=-1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_I64, 2, KT_DIMS(2, 9), -2, 2, 1374),
                                                kt_rand(KILN_I64, 2, KT_DIMS(4, 2), 0, 9, 1375)},
                               1, "gather last axis i64");
    fails += kiln_optest_sweep("Gather", "axis=-1", 0, 2,
                               (kiln_tensor *[]){kt_rand(KILN_U8, 2, KT_DIMS(2, 9), -2, 2, 1376),
                                                kt_rand(KILN_I64, 2, KT_DIMS(4, 2), 0, 9, 1377)},
                               1, "gather last axis u8");
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_gather = {
    .precision = KILN_PREC_FOLLOW, .prec_flags = KILN_PREC_SHRINKS,
    .name = "Gather", .min_inputs = 2, .max_inputs = 2, .min_outputs = 1, .max_outputs = 1,
    .infer = infer, .cpu_forward = forward, .test = KILN_OP_TESTS(test), .grad = grad,
};

const kiln_op_def kiln_op_gather_grad = {
    .precision = KILN_PREC_FP32,
    .name = "GatherGrad", .domain = "kiln", .min_inputs = 3, .max_inputs = 3, .min_outputs = 1,
    .max_outputs = 1, .shape_only_inputs = 1u << 1, .infer = infer_grad,
    .cpu_forward = forward_grad, .cpu_workspace = workspace_grad, .test = KILN_OP_TESTS(test_grad),
};
