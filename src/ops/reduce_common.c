/* reduce_common.c — shared infer/forward for ReduceSum/Mean/Max/Min; see reduce_common.h. */
#include "reduce_common.h"
#include "../core/optest.h"

#include <math.h>
#include <string.h>

/* Which dims a node reduces. */
typedef struct reduce_axes {
    bool reduced[KILN_MAX_DIMS];
    bool noop; /* empty axes with noop_with_empty_axes=1: identity */
} reduce_axes;

/* axes_index: where the axes input is (1 for the reductions, later for their gradients). */
static kiln_status parse_axes(kiln_op_ctx *c, int axes_input_opset, int axes_index, reduce_axes *ra) {
    const kiln_node *n = c->node;
    int rank = c->in[0]->ndim;
    memset(ra, 0, sizeof *ra);

    int count = 0;
    const int64_t *attr_axes = kiln_attr_ints(n, "axes", &count);
    const kiln_tensor *axes_t = c->n_in > axes_index ? c->in[axes_index] : NULL;
    bool noop_empty = false;
    if (n->opset >= axes_input_opset) {
        KILN_OP_CHECK(c, kiln_node_attr(n, "axes") == NULL, KILN_ERR_UNSUPPORTED,
                      "attribute 'axes' is not part of opset %d (axes is an input from opset %d)",
                      n->opset, axes_input_opset);
        noop_empty = kiln_attr_int(n, "noop_with_empty_axes", 0) != 0;
        count = 0;
        if (axes_t) {
            KILN_OP_CHECK(c, kiln_dtype_is_int(axes_t->dtype), KILN_ERR_TYPE,
                          "input 'axes' must be int64, got %s", kiln_dtype_name(axes_t->dtype));
            KILN_OP_CHECK(c, axes_t->ndim <= 1, KILN_ERR_SHAPE,
                          "input 'axes' must be 1-D, got rank %d", axes_t->ndim);
            KILN_OP_CHECK(c, axes_t->data != NULL || kiln_tensor_numel(axes_t) == 0,
                          KILN_ERR_UNSUPPORTED, "input 'axes' must be a constant");
            count = (int)kiln_tensor_numel(axes_t);
        }
    } else {
        KILN_OP_CHECK(c, axes_t == NULL, KILN_ERR_UNSUPPORTED,
                      "input 'axes' is not part of opset %d (it is an attribute before opset %d)",
                      n->opset, axes_input_opset);
    }
    KILN_OP_CHECK(c, count <= KILN_MAX_DIMS, KILN_ERR_SHAPE,
                  "%d axes given for a rank-%d input", count, rank);

    if (count == 0) {
        if (noop_empty) ra->noop = true;
        else for (int d = 0; d < rank; d++) ra->reduced[d] = true;
        return KILN_OK;
    }
    for (int i = 0; i < count; i++) {
        int64_t a = attr_axes ? attr_axes[i] : kiln_get_i64(axes_t, i);
        int64_t orig = a;
        KILN_OP_CHECK(c, kiln_norm_axis(&a, rank), KILN_ERR_SHAPE,
                      "axes[%d]=%lld is out of range for rank %d", i, (long long)orig, rank);
        KILN_OP_CHECK(c, !ra->reduced[a], KILN_ERR_SHAPE,
                      "axes[%d]=%lld repeats an axis", i, (long long)orig);
        ra->reduced[a] = true;
    }
    return KILN_OK;
}

kiln_status kiln_reduce_infer(kiln_op_ctx *c, int axes_input_opset, bool allow_int,
                              bool allow_bool) {
    const kiln_tensor *x = c->in[0];
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype) || (allow_int && kiln_dtype_is_int(x->dtype)) ||
                         (allow_bool && x->dtype == KILN_BOOL),
                  KILN_ERR_TYPE, "input dtype %s is not supported", kiln_dtype_name(x->dtype));
    reduce_axes ra;
    kiln_status st = parse_axes(c, axes_input_opset, 1, &ra);
    if (st != KILN_OK) return st;

    bool keepdims = kiln_attr_int(c->node, "keepdims", 1) != 0;
    int64_t dims[KILN_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!ra.reduced[d]) dims[nd++] = x->dims[d];
        else if (keepdims) dims[nd++] = 1;
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, nd, dims);
    return KILN_OK;
}

/* ------------------------------------------------------------------ forward */

/* The input seen as kept dims (the output, row-major) and reduced dims, after dropping
 * size-1 dims and merging neighbours of the same kind so that common cases (last axis,
 * all axes, NCHW spatial) become one or two plain loops. */
typedef struct reduce_layout {
    int nk, nr;
    int64_t ksize[KILN_MAX_DIMS], kstride[KILN_MAX_DIMS];
    int64_t rsize[KILN_MAX_DIMS], rstride[KILN_MAX_DIMS];
    int64_t count; /* elements reduced into each output */
} reduce_layout;

static void make_layout(const kiln_tensor *x, const reduce_axes *ra, reduce_layout *L) {
    int64_t strides[KILN_MAX_DIMS];
    kiln_strides(x->ndim, x->dims, strides);
    memset(L, 0, sizeof *L);
    L->count = 1;
    int last = -1; /* kind of the previous kept dim: 0 kept, 1 reduced */
    for (int d = 0; d < x->ndim; d++) {
        int64_t size = x->dims[d];
        if (ra->reduced[d]) L->count *= size;
        if (size == 1) continue;
        int kind = ra->reduced[d] ? 1 : 0;
        int64_t *sz = kind ? L->rsize : L->ksize;
        int64_t *sd = kind ? L->rstride : L->kstride;
        int *cnt = kind ? &L->nr : &L->nk;
        if (kind == last) {
            /* row-major neighbours: the merged dim steps by the inner stride */
            sz[*cnt - 1] *= size;
            sd[*cnt - 1] = strides[d];
        } else {
            sz[*cnt] = size;
            sd[*cnt] = strides[d];
            (*cnt)++;
        }
        last = kind;
    }
}

static void int_limits(kiln_dtype t, int64_t *lo, int64_t *hi) {
    switch (t) {
    case KILN_I8: *lo = INT8_MIN; *hi = INT8_MAX; break;
    case KILN_U8: *lo = 0; *hi = UINT8_MAX; break;
    case KILN_I16: *lo = INT16_MIN; *hi = INT16_MAX; break;
    case KILN_U16: *lo = 0; *hi = UINT16_MAX; break;
    case KILN_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case KILN_U32: *lo = 0; *hi = UINT32_MAX; break;
    case KILN_U64: *lo = 0; *hi = -1; break; /* bit pattern of UINT64_MAX */
    case KILN_BOOL: *lo = 0; *hi = 1; break;
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
    }
}

/* Offset of the first input element of output o. */
static int64_t kept_offset(const reduce_layout *L, int64_t o) {
    int64_t off = 0;
    for (int k = L->nk - 1; k >= 0; k--) {
        off += (o % L->ksize[k]) * L->kstride[k];
        o /= L->ksize[k];
    }
    return off;
}

/* Float accumulation of one run of n elements at stride s starting at flat index base. */
static void run_f(const kiln_tensor *x, int64_t base, int64_t n, int64_t s,
                  kiln_reduce_kind kind, double *acc) {
    double a = *acc;
    if (x->dtype == KILN_F32 || x->dtype == KILN_F64) {
        bool f32 = x->dtype == KILN_F32;
        const float *pf = f32 ? (const float *)x->data + base : NULL;
        const double *pd = f32 ? NULL : (const double *)x->data + base;
        if (kind == KILN_REDUCE_SUM || kind == KILN_REDUCE_MEAN) {
            if (f32) for (int64_t i = 0; i < n; i++) a += pf[i * s];
            else for (int64_t i = 0; i < n; i++) a += pd[i * s];
        } else {
            bool mx = kind == KILN_REDUCE_MAX;
            for (int64_t i = 0; i < n; i++) {
                double v = f32 ? pf[i * s] : pd[i * s];
                /* NaN propagates, as numpy's maximum/minimum do */
                if (isnan(v) || (mx ? v > a : v < a)) a = v;
            }
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            double v = kiln_get_f64(x, base + i * s);
            if (kind == KILN_REDUCE_SUM || kind == KILN_REDUCE_MEAN) a += v;
            else if (isnan(v) || (kind == KILN_REDUCE_MAX ? v > a : v < a)) a = v;
        }
    }
    *acc = a;
}

/* The forward-only kinds, element by element in double; m: LogSumExp's max. */
static void run_f_more(const kiln_tensor *x, int64_t base, int64_t n, int64_t s,
                       kiln_reduce_kind kind, double m, double *acc) {
    double a = *acc;
    for (int64_t i = 0; i < n; i++) {
        const double v = kiln_get_f64(x, base + i * s);
        switch (kind) {
        case KILN_REDUCE_L1: a += fabs(v); break;
        case KILN_REDUCE_L2:
        case KILN_REDUCE_SUM_SQUARE: a += v * v; break;
        case KILN_REDUCE_PROD: a *= v; break;
        case KILN_REDUCE_LOG_SUM_EXP: a += exp(v - m); break;
        default: a += v; break; /* LogSum */
        }
    }
    *acc = a;
}

static bool more_kind(kiln_reduce_kind kind) { return kind >= KILN_REDUCE_L1; }

/* Integer accumulation: sums wrap in uint64 (no signed overflow); u64 compares unsigned. */
static void run_i(const kiln_tensor *x, int64_t base, int64_t n, int64_t s,
                  kiln_reduce_kind kind, int64_t *acc) {
    int64_t a = *acc;
    bool u64 = x->dtype == KILN_U64;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = kiln_get_i64(x, base + i * s);
        switch (kind) {
        case KILN_REDUCE_SUM:
        case KILN_REDUCE_MEAN: a = (int64_t)((uint64_t)a + (uint64_t)v); break;
        case KILN_REDUCE_MAX:
            if (u64 ? (uint64_t)v > (uint64_t)a : v > a) a = v;
            break;
        case KILN_REDUCE_MIN:
            if (u64 ? (uint64_t)v < (uint64_t)a : v < a) a = v;
            break;
        case KILN_REDUCE_L1: a = (int64_t)((uint64_t)a + (uint64_t)(v < 0 && !u64 ? 0 - (uint64_t)v : (uint64_t)v)); break;
        case KILN_REDUCE_SUM_SQUARE: a = (int64_t)((uint64_t)a + (uint64_t)v * (uint64_t)v); break;
        case KILN_REDUCE_PROD: a = (int64_t)((uint64_t)a * (uint64_t)v); break;
        default: break; /* L2, LogSum, LogSumExp: through double */
        }
    }
    *acc = a;
}

/* Visit every reduced run of output o: the outer reduced dims are counted by hand, the
 * innermost one is the run. */
#define FOR_EACH_RUN(L, base, RUN)                                                        \
    do {                                                                                  \
        int64_t ridx_[KILN_MAX_DIMS] = {0};                                               \
        int inner_ = (L)->nr - 1;                                                         \
        int64_t rn_ = inner_ >= 0 ? (L)->rsize[inner_] : 1;                               \
        int64_t rs_ = inner_ >= 0 ? (L)->rstride[inner_] : 0;                             \
        int64_t off_ = (base);                                                            \
        for (;;) {                                                                        \
            RUN(off_, rn_, rs_);                                                          \
            int k_ = inner_ - 1;                                                          \
            for (; k_ >= 0; k_--) {                                                       \
                off_ += (L)->rstride[k_];                                                 \
                if (++ridx_[k_] < (L)->rsize[k_]) break;                                  \
                off_ -= ridx_[k_] * (L)->rstride[k_];                                     \
                ridx_[k_] = 0;                                                            \
            }                                                                             \
            if (k_ < 0) break;                                                            \
        }                                                                                 \
    } while (0)

kiln_status kiln_reduce_forward(kiln_op_ctx *c, int axes_input_opset, kiln_reduce_kind kind) {
    const kiln_tensor *x = c->in[0];
    kiln_tensor *y = c->out[0];
    reduce_axes ra;
    kiln_status st = parse_axes(c, axes_input_opset, 1, &ra);
    if (st != KILN_OK) return st;

    int64_t out_n = kiln_tensor_numel(y);
    if (ra.noop) {
        memcpy(y->data, x->data, (size_t)out_n * kiln_dtype_size(x->dtype));
        return KILN_OK;
    }
    reduce_layout L;
    make_layout(x, &ra, &L);
    bool is_float = kiln_dtype_is_float(x->dtype);

    if (L.count == 0) {
        /* every output reduces an empty set: write the reduction's identity */
        int64_t lo, hi;
        int_limits(x->dtype, &lo, &hi);
        for (int64_t o = 0; o < out_n; o++) {
            if (is_float) {
                double v = kind == KILN_REDUCE_MEAN  ? NAN
                           : kind == KILN_REDUCE_MAX ? -INFINITY
                           : kind == KILN_REDUCE_MIN ? INFINITY
                           : kind == KILN_REDUCE_PROD ? 1.0
                           : kind == KILN_REDUCE_LOG_SUM || kind == KILN_REDUCE_LOG_SUM_EXP ? -INFINITY
                                                                                              : 0.0;
                kiln_set_f64(y, o, v);
            } else {
                kiln_set_i64(y, o, kind == KILN_REDUCE_MAX ? lo : kind == KILN_REDUCE_MIN ? hi
                                   : kind == KILN_REDUCE_PROD ? 1 : 0);
            }
        }
        return KILN_OK;
    }

    int64_t count = L.count;
    bool big = out_n > 1 && out_n * count > (1 << 16);
    if (more_kind(kind) && (is_float || kind == KILN_REDUCE_L2 || kind == KILN_REDUCE_LOG_SUM ||
                            kind == KILN_REDUCE_LOG_SUM_EXP)) {
        #pragma omp parallel for if (big) schedule(static)
        for (int64_t o = 0; o < out_n; o++) {
            double m = 0, acc = kind == KILN_REDUCE_PROD ? 1.0 : 0.0;
            if (kind == KILN_REDUCE_LOG_SUM_EXP) {
                m = -INFINITY;
#define RUN_M(off, n, s) run_f(x, off, n, s, KILN_REDUCE_MAX, &m)
                FOR_EACH_RUN(&L, kept_offset(&L, o), RUN_M);
#undef RUN_M
            }
            if (kind == KILN_REDUCE_LOG_SUM_EXP && !isfinite(m)) {
                acc = m; /* all -inf, an inf or a NaN: the max is the result */
            } else {
#define RUN_F(off, n, s) run_f_more(x, off, n, s, kind, m, &acc)
                FOR_EACH_RUN(&L, kept_offset(&L, o), RUN_F);
#undef RUN_F
                if (kind == KILN_REDUCE_L2) acc = sqrt(acc);
                else if (kind == KILN_REDUCE_LOG_SUM) acc = log(acc);
                else if (kind == KILN_REDUCE_LOG_SUM_EXP) acc = m + log(acc);
            }
            kiln_set_f64(y, o, acc);
        }
    } else if (is_float) {
        double init = kind == KILN_REDUCE_MAX ? -INFINITY : kind == KILN_REDUCE_MIN ? INFINITY : 0.0;
        #pragma omp parallel for if (big) schedule(static)
        for (int64_t o = 0; o < out_n; o++) {
            double acc = init;
#define RUN_F(off, n, s) run_f(x, off, n, s, kind, &acc)
            FOR_EACH_RUN(&L, kept_offset(&L, o), RUN_F);
#undef RUN_F
            if (kind == KILN_REDUCE_MEAN) acc /= (double)count;
            if (y->dtype == KILN_F32) ((float *)y->data)[o] = (float)acc;
            else kiln_set_f64(y, o, acc);
        }
    } else {
        bool u64 = x->dtype == KILN_U64;
        #pragma omp parallel for if (big) schedule(static)
        for (int64_t o = 0; o < out_n; o++) {
            /* the first element seeds max/min so no per-dtype limits are needed */
            int64_t acc = (kind == KILN_REDUCE_MAX || kind == KILN_REDUCE_MIN)
                              ? kiln_get_i64(x, kept_offset(&L, o)) : kind == KILN_REDUCE_PROD ? 1 : 0;
#define RUN_I(off, n, s) run_i(x, off, n, s, kind, &acc)
            FOR_EACH_RUN(&L, kept_offset(&L, o), RUN_I);
#undef RUN_I
            if (kind == KILN_REDUCE_MEAN) {
                /* numpy's mean then astype: truncation toward zero */
                acc = u64 ? (int64_t)((uint64_t)acc / (uint64_t)count) : acc / count;
            }
            kiln_set_i64(y, o, acc);
        }
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- gradients */

/* dY's shape with the reduced dims kept as 1 (its flat layout either way). */
static void keepdims_shape(const kiln_tensor *x, const reduce_axes *ra, int64_t *dims) {
    for (int d = 0; d < x->ndim; d++) dims[d] = ra->reduced[d] ? 1 : x->dims[d];
}

static bool same_shape(const kiln_tensor *a, int ndim, const int64_t *dims) {
    if (a->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (a->dims[d] != dims[d]) return false;
    return true;
}

static bool with_y(kiln_reduce_kind kind) {
    return kind == KILN_REDUCE_MAX || kind == KILN_REDUCE_MIN || kind == KILN_REDUCE_L2;
}

kiln_status kiln_reduce_grad_infer(kiln_op_ctx *c, int axes_input_opset, kiln_reduce_kind kind) {
    const kiln_tensor *x = c->in[0], *dy = c->in[1];
    const kiln_tensor *y = with_y(kind) ? c->in[2] : NULL;
    KILN_OP_CHECK(c, kiln_dtype_is_float(x->dtype), KILN_ERR_TYPE, "X dtype %s is not a float type",
                  kiln_dtype_name(x->dtype));
    KILN_OP_CHECK(c, dy->dtype == x->dtype, KILN_ERR_TYPE, "dY must have X's dtype");
    reduce_axes ra;
    kiln_status st = parse_axes(c, axes_input_opset, with_y(kind) ? 3 : 2, &ra);
    if (st != KILN_OK) return st;
    /* dY is the forward output: X's shape with the reduced dims dropped or kept as 1 */
    int64_t kept[KILN_MAX_DIMS], dropped[KILN_MAX_DIMS];
    int nd = 0;
    keepdims_shape(x, &ra, kept);
    for (int d = 0; d < x->ndim; d++)
        if (!ra.reduced[d]) dropped[nd++] = x->dims[d];
    KILN_OP_CHECK(c, same_shape(dy, x->ndim, kept) || same_shape(dy, nd, dropped), KILN_ERR_SHAPE,
                  "dY does not have the reduction's output shape");
    if (y) {
        KILN_OP_CHECK(c, y->dtype == x->dtype && kiln_tensor_numel(y) == kiln_tensor_numel(dy),
                      KILN_ERR_SHAPE, "Y must be the forward output, shaped like dY");
    }
    kiln_tensor_set_shape(c->out[0], x->dtype, x->ndim, x->dims);
    return KILN_OK;
}

size_t kiln_reduce_grad_workspace(const kiln_op_ctx *c) {
    return (size_t)kiln_tensor_numel(c->in[1]) * sizeof(double);
}

kiln_status kiln_reduce_grad_forward(kiln_op_ctx *c, int axes_input_opset, kiln_reduce_kind kind) {
    const kiln_tensor *x = c->in[0], *dy = c->in[1]; // dY as (keepdims shape)
    const kiln_tensor *y = with_y(kind) ? c->in[2] : NULL; // like dY (Max/Min)
    kiln_tensor *dx = c->out[0]; // like X
    reduce_axes ra;
    kiln_status st = parse_axes(c, axes_input_opset, with_y(kind) ? 3 : 2, &ra);
    if (st != KILN_OK) return st;
    int64_t n = kiln_tensor_numel(x), ny = kiln_tensor_numel(dy);
    int64_t kept[KILN_MAX_DIMS], st_y[1][KILN_MAX_DIMS];
    keepdims_shape(x, &ra, kept);
    kiln_broadcast_strides(x->ndim, kept, x->ndim, x->dims, st_y[0]);
    double scale = 1.0;
    if (kind == KILN_REDUCE_MEAN && ny > 0) scale = (double)ny / (double)n;
    bool f32 = x->dtype == KILN_F32;
    const float *dyf = dy->data;
    float *dxf = dx->data;

    if (kind == KILN_REDUCE_SUM || kind == KILN_REDUCE_MEAN) {
        int64_t idx[KILN_MAX_DIMS] = {0}, off[1] = {0};
        for (int64_t i = 0; i < n; i++) {
            if (f32) dxf[i] = (float)(dyf[off[0]] * scale);
            else kiln_set_f64(dx, i, kiln_get_f64(dy, off[0]) * scale);
            kiln_index_next(x->ndim, x->dims, idx, 1, (const int64_t(*)[KILN_MAX_DIMS])st_y, off);
        }
        return KILN_OK;
    }
    if (kind == KILN_REDUCE_L2) { /* dX = dY / Y * X, 0 where Y = 0 (torch's norm backward) */
        int64_t idx[KILN_MAX_DIMS] = {0}, off[1] = {0};
        for (int64_t i = 0; i < n; i++) {
            const double yv = kiln_get_f64(y, off[0]);
            const double g = yv != 0 ? kiln_get_f64(dy, off[0]) / yv * kiln_get_f64(x, i) : 0.0;
            if (f32) dxf[i] = (float)g;
            else kiln_set_f64(dx, i, g);
            kiln_index_next(x->ndim, x->dims, idx, 1, (const int64_t(*)[KILN_MAX_DIMS])st_y, off);
        }
        return KILN_OK;
    }
    /* Max/Min: count the elements equal to each result, then share dY among them */
    double *ties = c->workspace; // (ny)
    for (int64_t o = 0; o < ny; o++) ties[o] = 0;
    int64_t idx[KILN_MAX_DIMS] = {0}, off[1] = {0};
    for (int64_t i = 0; i < n; i++) {
        ties[off[0]] += kiln_get_f64(x, i) == kiln_get_f64(y, off[0]);
        kiln_index_next(x->ndim, x->dims, idx, 1, (const int64_t(*)[KILN_MAX_DIMS])st_y, off);
    }
    memset(idx, 0, sizeof idx);
    off[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = kiln_get_f64(x, i) == kiln_get_f64(y, off[0]) ? kiln_get_f64(dy, off[0]) / ties[off[0]] : 0.0;
        if (f32) dxf[i] = (float)g;
        else kiln_set_f64(dx, i, g);
        kiln_index_next(x->ndim, x->dims, idx, 1, (const int64_t(*)[KILN_MAX_DIMS])st_y, off);
    }
    return KILN_OK;
}

kiln_status kiln_reduce_grad_rule(kiln_grad_ctx *g, const char *grad_op, kiln_reduce_kind kind) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    if (n->n_in > 1 && g->need[1])
        return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED, "%s node '%s': input axes has no gradient",
                         n->op_type, n->name);
    if (!g->need[0]) return KILN_OK;
    int axes = n->n_in > 1 ? n->in[1] : -1;
    int in[4] = {n->in[0], g->dy[0], with_y(kind) ? n->out[0] : axes, axes};
    int n_in = (with_y(kind) ? 3 : 2) + (axes >= 0);
    g->dx[0] = kiln_grad_emit(g, "kiln", grad_op, n_in, in, 1, NULL, true, NULL);
    return g->dx[0] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

#ifdef KILN_OPTESTS
int kiln_reduce_gradcheck(const char *op, const char *attrs, int opset, int n_axes, const int64_t *axes,
                          uint64_t seed, const char *label) {
    kiln_tensor *in[2] = {kt_rand(KILN_F64, 3, KT_DIMS(2, 3, 4), -1, 1, seed), NULL};
    if (n_axes >= 0) {
        in[1] = kt_make(KILN_I64, 1, KT_DIMS(n_axes), NULL);
        for (int i = 0; in[1] && i < n_axes; i++) kiln_set_i64(in[1], i, axes[i]);
    }
    return kiln_gradcheck(op, attrs, opset, n_axes >= 0 ? 2 : 1, in, NULL, label);
}
#endif /* KILN_OPTESTS */
