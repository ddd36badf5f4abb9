/*
 * layer_normalization.c — LayerNormalization (opset 17): X is seen as rows
 * (prod(dims[:axis]), prod(dims[axis:])) and each row is normalized by its own mean and
 * population variance:
 *   Y = (X - Mean) * InvStdDev * Scale + B,   InvStdDev = 1 / sqrt(Var + epsilon)
 * Attributes: axis (default -1, in [-r, r)), epsilon (1e-5), stash_type (1: float; the
 * dtype of the optional outputs Mean and InvStdDev, shaped dims[:axis] + 1s). Scale is
 * required and B optional; both are unidirectionally broadcastable to X, so they may
 * vary across rows too. Floats only. Statistics are always computed in double, which is
 * at least the precision stash_type asks for.
 *
 * Gradient: kiln.LayerNormGrad(X, Scale, dY, dMean, dInvStdDev) -> (dX, dScaleFull), the
 * last three optional, recomputing each row's statistics from X. Per row of D elements,
 * with xhat = (x - mean) * inv and g = dY * Scale:
 *   dX = inv * (g - mean(g) - xhat * mean(g * xhat)) + dMean / D - dInvStdDev * inv^2 * xhat / D
 * and dScaleFull = dY * xhat, shaped like X; the rule sums it (and dY for B) back to the
 * parameters' shapes with kiln.ReduceSumTo, so broadcast Scale and B of any shape work.
 */
#include "../core/optest.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static bool has_in(const kiln_op_ctx *c, int i) { return c->n_in > i && c->in[i] != NULL; }
static bool has_out(const kiln_op_ctx *c, int i) { return c->n_out > i && c->out[i] != NULL; }

static kiln_status infer(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE,
                  "input X dtype %s is not supported", kiln_dtype_name(x->dtype));
    int64_t axis = kiln_attr_int(c->node, "axis", -1), orig = axis;
    KILN_OP_CHECK(c, kiln_norm_axis(&axis, x->ndim), KILN_ERR_SHAPE,
                  "axis=%lld is out of range for rank %d", (long long)orig, x->ndim);
    KILN_OP_CHECK(c, has_in(c, 1), KILN_ERR_SHAPE, "input Scale is required");
    for (int i = 1; i < 3; i++) {
        if (!has_in(c, i)) continue;
        const kiln_tensor *p = c->in[i];
        const char *name = i == 1 ? "Scale" : "B";
        KILN_OP_CHECK(c, kiln_dtype_is_float(p->dtype), KILN_ERR_TYPE,
                      "input %s dtype %s is not supported", name, kiln_dtype_name(p->dtype));
        bool ok = p->ndim <= x->ndim;
        for (int d = 0; ok && d < p->ndim; d++) {
            int64_t pd = p->dims[p->ndim - 1 - d], xd = x->dims[x->ndim - 1 - d];
            ok = pd == xd || pd == 1;
        }
        KILN_OP_CHECK(c, ok, KILN_ERR_SHAPE,
                      "input %s does not broadcast to X (unidirectionally)", name);
    }
    int64_t stash = kiln_attr_int(c->node, "stash_type", KILN_F32);
    KILN_OP_CHECK(c, kiln_dtype_valid((kiln_dtype)stash) && kiln_dtype_is_float((kiln_dtype)stash),
                  KILN_ERR_UNSUPPORTED, "stash_type=%lld is not a float dtype", (long long)stash);

    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    int64_t sdims[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) sdims[d] = d < axis ? x->dims[d] : 1;
    for (int i = 1; i <= 2; i++)
        if (has_out(c, i)) kiln_tensor_set_shape(c->out[i], (kiln_dtype)stash, x->ndim, sdims);
    return KILN_OK;
}

static int64_t row_len(const kiln_op_ctx *c, int64_t *axis_out) {
    const kiln_tensor *x = c->in[0];
    int64_t axis = kiln_attr_int(c->node, "axis", -1), D = 1;
    kiln_norm_axis(&axis, x->ndim);
    for (int d = (int)axis; d < x->ndim; d++) D *= x->dims[d];
    *axis_out = axis;
    return D;
}

/* Scale and B expanded to one row of doubles each. */
static size_t workspace(const kiln_op_ctx *c) {
    int64_t axis;
    return 2 * (size_t)row_len(c, &axis) * sizeof(double);
}

/* The values of p (broadcast to X, element strides st over X's dims) for the row whose
 * first element is at flat offset row_off of p, into dst[D]; dflt when p is absent. */
static void expand_row(const kiln_tensor *p, const int64_t *st, const kiln_tensor *x, int axis,
                       int64_t row_off, int64_t D, double dflt, double *dst) {
    if (!p) {
        for (int64_t j = 0; j < D; j++) dst[j] = dflt;
        return;
    }
    for (int64_t j = 0; j < D; j++) {
        int64_t off = row_off, r = j;
        for (int d = x->ndim - 1; d >= axis; d--) {
            off += (r % x->dims[d]) * st[d];
            r /= x->dims[d];
        }
        dst[j] = kiln_get_f64(p, off);
    }
}

/* Offset in p (strides st) of the first element of row o. */
static int64_t row_offset(const int64_t *st, const kiln_tensor *x, int axis, int64_t o) {
    int64_t off = 0;
    for (int d = axis - 1; d >= 0; d--) {
        off += (o % x->dims[d]) * st[d];
        o /= x->dims[d];
    }
    return off;
}

/* Normalize row o of X with the expanded scale/bias rows. */
static void norm_row(kiln_op_ctx *c, int64_t o, int64_t D, double eps, const double *sc,
                     const double *bi) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    int64_t base = o * D;
    const float *xf = x->dtype == KILN_F32 ? (const float *)x->data + base : NULL; // (D)
    float *yf = xf ? (float *)y->data + base : NULL;
    double sum = 0, sq = 0;
    for (int64_t j = 0; j < D; j++) sum += xf ? xf[j] : kiln_get_f64(x, base + j);
    double mean = sum / (double)D;
    for (int64_t j = 0; j < D; j++) {
        double d = (xf ? xf[j] : kiln_get_f64(x, base + j)) - mean;
        sq += d * d;
    }
    double inv = 1.0 / sqrt(sq / (double)D + eps);
    if (yf) {
        for (int64_t j = 0; j < D; j++) yf[j] = (float)((xf[j] - mean) * inv * sc[j] + bi[j]);
    } else {
        for (int64_t j = 0; j < D; j++)
            kiln_set_f64(y, base + j, (kiln_get_f64(x, base + j) - mean) * inv * sc[j] + bi[j]);
    }
    if (has_out(c, 1)) kiln_set_f64(c->out[1], o, mean);
    if (has_out(c, 2)) kiln_set_f64(c->out[2], o, inv);
}

static kiln_status forward(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    const kiln_tensor *scale = c->in[1], *bias = has_in(c, 2) ? c->in[2] : NULL;
    int64_t axis;
    int64_t D = row_len(c, &axis);
    int64_t rows = D > 0 ? kiln_tensor_numel(x) / D : 0;
    double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    double *sc = c->workspace, *bi = sc + D; // (D), (D)

    int64_t sst[KILN_MAX_DIMS], bst[KILN_MAX_DIMS];
    kiln_broadcast_strides(scale->ndim, scale->dims, x->ndim, x->dims, sst);
    if (bias) kiln_broadcast_strides(bias->ndim, bias->dims, x->ndim, x->dims, bst);
    else memset(bst, 0, sizeof bst);
    bool per_row = false; /* Scale or B differ between rows */
    for (int d = 0; d < axis; d++) per_row |= sst[d] != 0 || bst[d] != 0;

    if (!per_row) {
        expand_row(scale, sst, x, (int)axis, 0, D, 1.0, sc);
        expand_row(bias, bst, x, (int)axis, 0, D, 0.0, bi);
        #pragma omp parallel for if (rows * D > (1 << 15)) schedule(static)
        for (int64_t o = 0; o < rows; o++) norm_row(c, o, D, eps, sc, bi);
    } else {
        for (int64_t o = 0; o < rows; o++) {
            expand_row(scale, sst, x, (int)axis, row_offset(sst, x, (int)axis, o), D, 1.0, sc);
            expand_row(bias, bst, x, (int)axis, row_offset(bst, x, (int)axis, o), D, 0.0, bi);
            norm_row(c, o, D, eps, sc, bi);
        }
    }
    return KILN_OK;
}

/* ----------------------------------------------------------------- gradient */

static kiln_status grad(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    /* n is not read after emitting: adding nodes may move it */
    int x = n->in[0], scale = n->in[1], bias = n->n_in > 2 ? n->in[2] : -1;
    int dy = g->dy[0], dmean = n->n_out > 1 ? g->dy[1] : -1, dinv = n->n_out > 2 ? g->dy[2] : -1;
    int in[5] = {x, scale, dy, dmean, dinv}, n_in = 5;
    while (in[n_in - 1] < 0) n_in--;
    /* dScaleFull also stands for a zero dY when B needs a gradient but only Mean or
     * InvStdDev reach the loss */
    bool full = g->need[1] || (bias >= 0 && g->need[2] && dy < 0);
    int outs[2];
    if (kiln_grad_emit(g, "kiln", "LayerNormGrad", n_in, in, full ? 2 : 1, outs, true, NULL) < 0)
        return KILN_ERR_OUT_OF_MEMORY;
    if (g->need[0]) g->dx[0] = outs[0];
    if (g->need[1] && (g->dx[1] = kiln_grad_unbroadcast(g, outs[1], scale)) < 0) return KILN_ERR_OUT_OF_MEMORY;
    if (bias >= 0 && g->need[2] && (g->dx[2] = kiln_grad_unbroadcast(g, dy >= 0 ? dy : outs[1], bias)) < 0)
        return KILN_ERR_OUT_OF_MEMORY;
    return KILN_OK;
}

static bool same_shape(const kiln_tensor *a, const kiln_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

static kiln_status infer_grad(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0];
    kiln_op_ctx fwd = *c;
    fwd.n_in = 2;
    fwd.n_out = 1;
    kiln_status st = infer(&fwd); /* X, Scale, axis, and dX's shape */
    if (st != KILN_OK) return st;
    const kiln_tensor *dy = has_in(c, 2) ? c->in[2] : NULL;
    if (dy)
        KILN_OP_CHECK(c, dy->dtype == x->dtype && same_shape(dy, x), KILN_ERR_SHAPE,
                      "dY must have X's dtype and shape");
    int64_t axis = kiln_attr_int(c->node, "axis", -1), rows = 1;
    kiln_norm_axis(&axis, x->ndim);
    for (int d = 0; d < axis; d++) rows *= x->dims[d];
    for (int i = 3; i < 5; i++)
        if (has_in(c, i))
            KILN_OP_CHECK(c, kiln_dtype_is_float(c->in[i]->dtype) && kiln_tensor_numel(c->in[i]) == rows,
                          KILN_ERR_SHAPE,
                          "%s must be a float tensor of one value per row", i == 3 ? "dMean" : "dInvStdDev");
    if (has_out(c, 1)) kiln_tensor_set_shape(c->out[1], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

static size_t workspace_grad(const kiln_op_ctx *c) {
    int64_t axis;
    return (size_t)row_len(c, &axis) * sizeof(double);
}

/* dX (and dY * xhat) of row o, with the expanded scale row sc. */
static void grad_row(kiln_op_ctx *c, int64_t o, int64_t D, double eps, const double *sc) {
    const kiln_tensor *x = c->in[0];
    const kiln_tensor *dy = has_in(c, 2) ? c->in[2] : NULL;
    kiln_tensor *dx = c->out[0], *dfull = has_out(c, 1) ? c->out[1] : NULL;
    int64_t base = o * D;
    bool f32 = x->dtype == KILN_F32;
    const float *xf = f32 ? (const float *)x->data + base : NULL; // (D)
    const float *dyf = f32 && dy ? (const float *)dy->data + base : NULL;
    float *dxf = f32 ? (float *)dx->data + base : NULL;
#define XV(j) (xf ? (double)xf[j] : kiln_get_f64(x, base + (j)))
#define DYV(j) (!dy ? 0.0 : dyf ? (double)dyf[j] : kiln_get_f64(dy, base + (j)))
    double sum = 0, sq = 0;
    for (int64_t j = 0; j < D; j++) sum += XV(j);
    double mean = sum / (double)D;
    for (int64_t j = 0; j < D; j++) sq += (XV(j) - mean) * (XV(j) - mean);
    double inv = 1.0 / sqrt(sq / (double)D + eps);
    double sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < D; j++) {
        double gj = DYV(j) * sc[j];
        sum_g += gj;
        sum_gx += gj * (XV(j) - mean) * inv;
    }
    double dmean = has_in(c, 3) ? kiln_get_f64(c->in[3], o) : 0;
    double dinv = has_in(c, 4) ? kiln_get_f64(c->in[4], o) : 0;
    /* dX = inv * g + cx * xhat + k */
    double cx = -(inv * sum_gx + dinv * inv * inv) / (double)D;
    double k = (dmean - inv * sum_g) / (double)D;
    for (int64_t j = 0; j < D; j++) {
        double xhat = (XV(j) - mean) * inv, g = DYV(j);
        double r = inv * g * sc[j] + cx * xhat + k;
        if (dxf) dxf[j] = (float)r;
        else kiln_set_f64(dx, base + j, r);
        if (dfull) kiln_set_f64(dfull, base + j, g * xhat);
    }
#undef XV
#undef DYV
}

static kiln_status forward_grad(kiln_op_ctx *c) {
    const kiln_tensor *x = c->in[0], *scale = c->in[1];
    int64_t axis;
    int64_t D = row_len(c, &axis);
    int64_t rows = D > 0 ? kiln_tensor_numel(x) / D : 0;
    double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
    double *sc = c->workspace; // (D)
    int64_t sst[KILN_MAX_DIMS];
    kiln_broadcast_strides(scale->ndim, scale->dims, x->ndim, x->dims, sst);
    bool per_row = false;
    for (int d = 0; d < axis; d++) per_row |= sst[d] != 0;
    if (!per_row) {
        expand_row(scale, sst, x, (int)axis, 0, D, 1.0, sc);
        #pragma omp parallel for if (rows * D > (1 << 15)) schedule(static)
        for (int64_t o = 0; o < rows; o++) grad_row(c, o, D, eps, sc);
    } else {
        for (int64_t o = 0; o < rows; o++) {
            expand_row(scale, sst, x, (int)axis, row_offset(sst, x, (int)axis, o), D, 1.0, sc);
            grad_row(c, o, D, eps, sc);
        }
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
static int test(void) {
    int fails = 0;
    kiln_tensor *in[3], *out[3];
    /* expected values: numpy float64, (x - mean) / sqrt(var + eps) * scale + B per row */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 4, -3, 0, 0.5));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(1, 0.5, -2));
    in[2] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(0, 1, 0.25));
    out[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3),
                     KT_VALS(-1.0690415314502977, 0.8663698085687127, -2.4226038286257436,
                             -1.4018231175993843, 1.2695813687691124, -1.4753207601223193));
    out[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(2.3333333333333335, -0.8333333333333334));
    out[2] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(0.8017811485877232, 0.6469952850458697));
    fails += kiln_optest("LayerNormalization", "", 3, in, 3, out, 1e-6, 1e-6,
                         "layernorm last axis with Mean, InvStdDev");

    in[0] = kt_make(KILN_F64, 3, KT_DIMS(2, 2, 2), KT_VALS(1, 2, 3, 5, -1, -1, 2, 0.5));
    in[1] = kt_make(KILN_F64, 2, KT_DIMS(2, 2), KT_VALS(1, 2, 3, -1));
    in[2] = NULL;
    out[0] = kt_make(KILN_F64, 3, KT_DIMS(2, 2, 2),
                     KT_VALS(-1.1832132521355805, -1.0141827875447833, 0.5070913937723917,
                             -1.5212741813171748, -0.9045311100010948, -1.8090622200021895,
                             4.5226555500054735, -0.30151037000036496));
    out[1] = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 1), KT_VALS(2.75, 0.125));
    out[2] = kt_make(KILN_F32, 3, KT_DIMS(2, 1, 1), KT_VALS(0.6761218583631888, 0.8040276533343065));
    fails += kiln_optest("LayerNormalization", "axis=1", 3, in, 3, out, 1e-6, 1e-6,
                         "layernorm axis 1 f64 no B");

    in[0] = kt_make(KILN_F16, 3, KT_DIMS(2, 2, 2), KT_VALS(1, 2, 3, 5, -1, -1, 2, 0.5));
    in[1] = kt_make(KILN_F16, 1, KT_DIMS(1), KT_VALS(2));
    in[2] = kt_make(KILN_F16, 1, KT_DIMS(1), KT_VALS(0.5));
    out[0] = kt_make(KILN_F16, 3, KT_DIMS(2, 2, 2),
                     KT_VALS(0.03824692200674318, 1.093682528848473, 2.1491181356902027,
                             4.2599893493736625, -2.072624291676717, -2.072624291676717,
                             1.093682528848473, -0.48947088141412176));
    out[1] = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(1.4375));
    out[2] = kt_make(KILN_F32, 3, KT_DIMS(1, 1, 1), KT_VALS(0.5277178034208649));
    fails += kiln_optest("LayerNormalization", "axis=0;epsilon=1e-3", 3, in, 3, out, 2e-3, 2e-3,
                         "layernorm axis 0 f16, broadcast Scale and B");

    /* Scale (2,1) broadcast over (2,3) with axis 1: a different scale per row */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), KT_VALS(1, 2, 4, -3, 0, 0.5));
    in[1] = kt_make(KILN_F32, 2, KT_DIMS(2, 1), KT_VALS(2, -1));
    out[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3),
                     KT_VALS(-2.1380830629005954, -0.5345207657251491, 2.6726038286257436,
                             1.4018231175993843, -0.5391627375382247, -0.8626603800611596));
    fails += kiln_optest("LayerNormalization", "axis=1", 2, in, 1, out, 1e-6, 1e-6,
                         "layernorm per-row Scale");

    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(4), NULL);
    fails += kiln_optest_fails("LayerNormalization", "", 2, in, 1, KILN_ERR_SHAPE,
                               "layernorm Scale of the wrong length");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(2, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    fails += kiln_optest_fails("LayerNormalization", "axis=2", 2, in, 1, KILN_ERR_SHAPE,
                               "layernorm axis out of range");

    /* gradients: last axis, axis 1 without B, a Scale that varies across rows, and the
     * Mean / InvStdDev outputs in the loss too (stash_type 11: double, like X) */
    fails += kiln_gradcheck("LayerNormalization", "", 17, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -2, 2, 1),
                                              kt_rand(KILN_F64, 1, KT_DIMS(4), -1, 1, 2),
                                              kt_rand(KILN_F64, 1, KT_DIMS(4), -1, 1, 3)},
                            NULL, "layernorm grad last axis");
    fails += kiln_gradcheck("LayerNormalization", "axis=1;epsilon=0.01", 17, 2,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -2, 2, 4),
                                              kt_rand(KILN_F64, 2, KT_DIMS(3, 4), -1, 1, 5)},
                            NULL, "layernorm grad axis 1 no B");
    fails += kiln_gradcheck("LayerNormalization", "axis=2", 17, 3,
                            (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -2, 2, 6),
                                              kt_rand(KILN_F64, 3, KT_DIMS(2, 1, 4), -1, 1, 7),
                                              kt_rand(KILN_F64, 2, KT_DIMS(3, 1), -1, 1, 8)},
                            NULL, "layernorm grad per-row Scale, broadcast B");
    /* the checker adds the outputs' losses with Sum, whose gradient rule comes with the
     * elementwise ops' gradients */
    const kiln_op_def *sum = kiln_op_find("Sum");
    if (sum && sum->grad)
        fails += kiln_gradcheck_ex("LayerNormalization", "axis=-2;stash_type=11", 17, 3,
                                   (kiln_tensor *[]){kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -2, 2, 9),
                                                     kt_rand(KILN_F64, 1, KT_DIMS(1), -1, 1, 10),
                                                     kt_rand(KILN_F64, 1, KT_DIMS(4), -1, 1, 11)},
                                   NULL, 3, 1.0, "layernorm grad with Mean and InvStdDev");
    else
        printf("skip layernorm grad with Mean and InvStdDev: Sum has no gradient rule yet\n");
    /* random inputs of odd sizes, for the backend sweep (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("LayerNormalization", "axis=-1", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 7, 129), -2, 2, 301),
                                                kt_rand(KILN_F32, 1, KT_DIMS(129), 0.5, 2, 302),
                                                kt_rand(KILN_F32, 1, KT_DIMS(129), -1, 1, 303)},
                               1, "layernorm random rows of 129");
    fails += kiln_optest_sweep("LayerNormalization", "axis=1;epsilon=0.001", 0, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(2, 5, 9), -2, 2, 304),
                                                kt_rand(KILN_F32, 2, KT_DIMS(5, 9), 0.5, 2, 305),
                                                kt_rand(KILN_F32, 2, KT_DIMS(5, 9), -1, 1, 306)},
                               1, "layernorm random axis 1");
    /* the cases test_cuda_ops.c wrote by hand, swept on every backend (tests/gpu/test_backend_ops.c) */
    fails += kiln_optest_sweep("LayerNormalization", "", 17, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(4, 33), -2, 2, 1535),
                                                kt_rand(KILN_F32, 1, KT_DIMS(33), -2, 2, 1536),
                                                kt_rand(KILN_F32, 1, KT_DIMS(33), -2, 2, 1537)},
                               1, "layernormalization last axis");
    fails += kiln_optest_sweep("LayerNormalization", "axis=2;epsilon=0.001", 17, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 4, 5), -2, 2, 1538),
                                                kt_rand(KILN_F32, 3, KT_DIMS(1, 4, 5), -2, 2, 1539),
                                                kt_rand(KILN_F32, 2, KT_DIMS(4, 5), -2, 2, 1540)},
                               1, "layernormalization two axes, (1,4,5) parameters");
    fails += kiln_optest_sweep("LayerNormalization", "", 17, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(6, 16), -2, 2, 1541),
                                                kt_rand(KILN_F32, 1, KT_DIMS(16), -2, 2, 1542)},
                               1, "layernormalization no B");
    fails += kiln_optest_sweep("LayerNormalization", "", 17, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 8), -2, 2, 1543),
                                                kt_rand(KILN_F32, 1, KT_DIMS(1), -2, 2, 1544),
                                                kt_rand(KILN_F32, 1, KT_DIMS(1), -2, 2, 1545)},
                               1, "layernormalization one scale value");
    fails += kiln_optest_sweep("LayerNormalization", "", 17, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(3, 1000), 3, 5, 1546),
                                                kt_rand(KILN_F32, 1, KT_DIMS(1000), -2, 2, 1547),
                                                kt_rand(KILN_F32, 1, KT_DIMS(1000), -2, 2, 1548)},
                               1, "layernormalization long rows, offset values");
    fails += kiln_optest_sweep("LayerNormalization", "axis=1", 17, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 4, 6), -2, 2, 1549),
                                                kt_rand(KILN_F32, 2, KT_DIMS(4, 6), -2, 2, 1550),
                                                kt_rand(KILN_F32, 2, KT_DIMS(4, 6), -2, 2, 1551)},
                               3, "layernormalization Mean and InvStdDev outputs");
    /* Scale and B broadcast within the row (D = 4*6, 6 values): a backend that reads them
     * by position in the row must refuse this one (cuda did read past them) */
    fails += kiln_optest_sweep("LayerNormalization", "axis=1", 17, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 4, 6), -2, 2, 1552),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), -2, 2, 1553),
                                                kt_rand(KILN_F32, 1, KT_DIMS(6), -2, 2, 1554)},
                               1, "layernormalization Scale and B broadcast within the row");
    /* ConvNeXt's rows: channels-last maps of C = 96 / 192 / 384 / 768 (CUDA: a group of
     * 4..32 lanes per row, the row in registers), values offset from 0 (the variance is
     * taken around the mean), many short rows in part-filled blocks, a tail of lanes */
    fails += kiln_optest_sweep("LayerNormalization", "axis=-1;epsilon=1e-6", 17, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 4, KT_DIMS(2, 5, 7, 96), 1, 3, 1555),
                                                kt_rand(KILN_F32, 1, KT_DIMS(96), 0.5, 2, 1556),
                                                kt_rand(KILN_F32, 1, KT_DIMS(96), -1, 1, 1557)},
                               1, "layernormalization channels-last C = 96");
    fails += kiln_optest_sweep("LayerNormalization", "axis=-1;epsilon=1e-6", 17, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 3, KT_DIMS(3, 5, 192), -2, 2, 1558),
                                                kt_rand(KILN_F32, 1, KT_DIMS(192), 0.5, 2, 1559),
                                                kt_rand(KILN_F32, 1, KT_DIMS(192), -1, 1, 1560)},
                               1, "layernormalization C = 192");
    fails += kiln_optest_sweep("LayerNormalization", "axis=-1", 17, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(70, 384), -2, 2, 1561),
                                                kt_rand(KILN_F32, 1, KT_DIMS(384), 0.5, 2, 1562),
                                                kt_rand(KILN_F32, 1, KT_DIMS(384), -1, 1, 1563)},
                               3, "layernormalization C = 384 with Mean and InvStdDev");
    fails += kiln_optest_sweep("LayerNormalization", "axis=-1", 17, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(5, 768), -2, 2, 1564),
                                                kt_rand(KILN_F32, 1, KT_DIMS(768), 0.5, 2, 1565),
                                                kt_rand(KILN_F32, 1, KT_DIMS(768), -1, 1, 1566)},
                               1, "layernormalization C = 768");
    fails += kiln_optest_sweep("LayerNormalization", "axis=-1", 17, 2,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(600, 8), -2, 2, 1567),
                                                kt_rand(KILN_F32, 1, KT_DIMS(8), 0.5, 2, 1568)},
                               3, "layernormalization 600 rows of 8, no B, Mean and InvStdDev");
    /* many rows of a few vectors: with a few blocks (the CUDA test's KILN_CUDA_LN_PIPE_GRID=3)
     * each takes several turns of rows, the last one part-filled */
    fails += kiln_optest_sweep("LayerNormalization", "axis=-1", 17, 3,
                               (kiln_tensor *[]){kt_rand(KILN_F32, 2, KT_DIMS(700, 64), -1, 3, 1569),
                                                kt_rand(KILN_F32, 1, KT_DIMS(64), 0.5, 2, 1570),
                                                kt_rand(KILN_F32, 1, KT_DIMS(64), -1, 1, 1571)},
                               3, "layernormalization 700 rows of 64, Mean and InvStdDev");
    return fails;
}

static int test_grad(void) {
    int fails = 0;
    kiln_tensor *in[5], *out[2];
    /* one row x = (-1,-1,2): mean 0, var 2, eps 2 -> inv 0.5, xhat = (-0.5,-0.5,1);
     * Scale (2,1,2), dY (1,0,2): g = (2,0,4), mean(g) 2, mean(g xhat) 1,
     * dX = 0.5 (g - 2 - xhat) = (0.25,-0.75,0.5), dScaleFull = dY xhat = (-0.5,0,2) */
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(1, 3), KT_VALS(-1, -1, 2));
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), KT_VALS(2, 1, 2));
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(1, 3), KT_VALS(1, 0, 2));
    out[0] = kt_make(KILN_F32, 2, KT_DIMS(1, 3), KT_VALS(0.25, -0.75, 0.5));
    out[1] = kt_make(KILN_F32, 2, KT_DIMS(1, 3), KT_VALS(-0.5, 0, 2));
    fails += kiln_optest("LayerNormGrad", "epsilon=2.0", 3, in, 2, out, 1e-6, 1e-6, "layernorm grad by hand");
    /* plus dMean 3 (adds 3/3) and dInvStdDev 4 (adds -4 * 0.25 * xhat / 3) */
    in[0] = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(-1, -1, 2));
    in[1] = kt_make(KILN_F64, 1, KT_DIMS(3), KT_VALS(2, 1, 2));
    in[2] = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(1, 0, 2));
    in[3] = kt_make(KILN_F32, 2, KT_DIMS(1, 1), KT_VALS(3));
    in[4] = kt_make(KILN_F32, 2, KT_DIMS(1, 1), KT_VALS(4));
    out[0] = kt_make(KILN_F64, 2, KT_DIMS(1, 3), KT_VALS(1.4166666666666667, 0.4166666666666667, 1.1666666666666667));
    fails += kiln_optest("LayerNormGrad", "epsilon=2.0", 5, in, 1, out, 1e-14, 1e-14,
                         "layernorm grad by hand with dMean, dInvStdDev");
    in[0] = kt_make(KILN_F32, 2, KT_DIMS(1, 3), NULL);
    in[1] = kt_make(KILN_F32, 1, KT_DIMS(3), NULL);
    in[2] = kt_make(KILN_F32, 2, KT_DIMS(3, 1), NULL);
    fails += kiln_optest_fails("LayerNormGrad", "", 3, in, 1, KILN_ERR_SHAPE, "layernorm grad dY of the wrong shape");
    return fails;
}
#endif /* KILN_OPTESTS */

/* Low precision: X, Scale, B and Y in L (ONNX's one type T), Mean and InvStdDev f32
 * (stash_type); every kernel keeps the statistics in float or double (a Cast to f32 and
 * back around it only moved bytes). */
const kiln_op_def kiln_op_layer_normalization = {
    .precision = KILN_PREC_LOW, .f32_outputs = 0x6u /* Mean, InvStdDev */,
    .name = "LayerNormalization", .min_inputs = 2, .max_inputs = 3,
    .min_outputs = 1, .max_outputs = 3,
    .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .test = KILN_OP_TESTS(test),
    .grad = grad,
};

const kiln_op_def kiln_op_layer_norm_grad = {
    .precision = KILN_PREC_FP32,
    .name = "LayerNormGrad", .domain = "kiln", .min_inputs = 2, .max_inputs = 5,
    .min_outputs = 1, .max_outputs = 2,
    .infer = infer_grad, .cpu_forward = forward_grad, .cpu_workspace = workspace_grad, .test = KILN_OP_TESTS(test_grad),
};
