/* binary.c — broadcast plans, shared infer/forward and gradient pieces for elementwise
 * ops; see binary.h. */
#include "binary.h"

#include "../core/optest.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>

/* Output elements per chunk: long enough that the per-chunk bookkeeping and the kernel
 * call vanish, short enough to give threads balanced work. */
#define CHUNK 8192
/* Below this many output elements a single thread is faster than waking a team. */
#define PAR_MIN (1 << 16)

/* ------------------------------------------------------------ broadcast plan */

void kiln_bcast_init(kiln_bcast *p, int ndim, const int64_t *dims, int nin,
                     const kiln_tensor *const *in) {
    int64_t st[KILN_BCAST_MAX_IN][KILN_MAX_DIMS];
    memset(p, 0, sizeof *p);
    p->nin = nin;
    p->numel = kiln_numel(ndim, dims);
    for (int k = 0; k < nin; k++)
        kiln_broadcast_strides(in[k]->ndim, in[k]->dims, ndim, dims, st[k]);
    /* Drop size-1 dims and merge a dim into the one before it when every input walks the
     * pair as one run (outer stride == inner stride * inner size; also true for two
     * broadcast dims, 0 == 0 * n). */
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] == 1) continue;
        bool merge = nd > 0;
        for (int k = 0; k < nin && merge; k++)
            merge = p->st[k][nd - 1] == st[k][d] * dims[d];
        if (merge) {
            p->dims[nd - 1] *= dims[d];
            for (int k = 0; k < nin; k++) p->st[k][nd - 1] = st[k][d];
        } else {
            p->dims[nd] = dims[d];
            for (int k = 0; k < nin; k++) p->st[k][nd] = st[k][d];
            nd++;
        }
    }
    if (nd == 0) { /* a scalar output, or all dims 1 */
        p->dims[0] = 1;
        nd = 1;
    }
    p->nd = nd;
}

/* Run tasks t0..t1-1 of the plan, where task t is piece t % pieces of row t / pieces and
 * a row is one run of the innermost (merged) dim. */
static void run_tasks(const kiln_bcast *p, int64_t t0, int64_t t1, int64_t pieces,
                      kiln_bcast_fn fn, void *arg) {
    if (t0 >= t1) return;
    const int outer = p->nd - 1;
    const int64_t len = p->dims[outer];
    int64_t row = t0 / pieces, piece = t0 % pieces;
    int64_t idx[KILN_MAX_DIMS] = {0}, roff[KILN_BCAST_MAX_IN] = {0};
    /* The multi-index of the first row, found once; later rows advance with
     * kiln_index_next. */
    int64_t r = row;
    for (int d = outer - 1; d >= 0; d--) {
        idx[d] = r % p->dims[d];
        r /= p->dims[d];
        for (int k = 0; k < p->nin; k++) roff[k] += idx[d] * p->st[k][d];
    }
    for (int64_t t = t0; t < t1; t++) {
        kiln_bcast_chunk ch;
        const int64_t start = piece * CHUNK;
        ch.n = len - start < CHUNK ? len - start : CHUNK;
        ch.y = row * len + start;
        for (int k = 0; k < p->nin; k++) {
            ch.inc[k] = p->st[k][outer];
            ch.off[k] = roff[k] + start * ch.inc[k];
        }
        fn(&ch, arg);
        if (++piece == pieces) {
            piece = 0;
            row++;
            if (outer > 0) kiln_index_next(outer, p->dims, idx, p->nin, p->st, roff);
        }
    }
}

void kiln_bcast_run(const kiln_bcast *p, kiln_bcast_fn fn, void *arg) {
    if (p->numel == 0) return;
    const int64_t len = p->dims[p->nd - 1];
    const int64_t pieces = (len + CHUNK - 1) / CHUNK;
    const int64_t tasks = p->numel / len * pieces;
    int64_t nt = p->numel >= PAR_MIN ? kiln_cpu_threads() : 1;
    if (nt > tasks) nt = tasks;
    if (nt <= 1) {
        run_tasks(p, 0, tasks, pieces, fn, arg);
        return;
    }
#pragma omp parallel num_threads((int)nt)
    {
        const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        run_tasks(p, tasks * t / T, tasks * (t + 1) / T, pieces, fn, arg);
    }
}

bool kiln_bcast_shape_n(int n, const kiln_tensor *const *t, int *ndim, int64_t *dims) {
    int nd = t[0]->ndim;
    int64_t d[KILN_MAX_DIMS];
    memcpy(d, t[0]->dims, sizeof(int64_t) * (size_t)nd);
    for (int i = 1; i < n; i++) {
        int64_t tmp[KILN_MAX_DIMS];
        int ntmp;
        if (!kiln_broadcast_shape(nd, d, t[i]->ndim, t[i]->dims, &ntmp, tmp)) return false;
        nd = ntmp;
        memcpy(d, tmp, sizeof(int64_t) * (size_t)nd);
    }
    *ndim = nd;
    memcpy(dims, d, sizeof(int64_t) * (size_t)nd);
    return true;
}

/* ------------------------------------------------------------ infer */

static kiln_status check_dtype(kiln_op_ctx *c, int i, unsigned flags) {
    kiln_dtype t = c->in[i]->dtype;
    bool ok = (kiln_dtype_is_float(t) && (flags & KILN_BIN_FLOAT)) ||
              (kiln_dtype_is_int(t) && (flags & KILN_BIN_INT)) ||
              (t == KILN_BOOL && (flags & KILN_BIN_BOOL));
    KILN_OP_CHECK(c, ok, KILN_ERR_TYPE, "input %d dtype %s is not supported", i,
                  kiln_dtype_name(t));
    return KILN_OK;
}

kiln_status kiln_binary_infer(kiln_op_ctx *c, unsigned flags) {
    const kiln_tensor *a = c->in[0], *b = c->in[1];
    KILN_OP_CHECK(c, a && b, KILN_ERR_INVALID_ARGUMENT, "needs two inputs");
    kiln_status st = check_dtype(c, 0, flags);
    if (st == KILN_OK) st = check_dtype(c, 1, flags);
    if (st != KILN_OK) return st;
    KILN_OP_CHECK(c, (flags & KILN_BIN_MIXED) || a->dtype == b->dtype, KILN_ERR_TYPE,
                  "input dtypes differ: input 0 is %s, input 1 is %s",
                  kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    bool ok = kiln_broadcast_shape(a->ndim, a->dims, b->ndim, b->dims, &nd, dims);
    KILN_OP_CHECK(c, ok, KILN_ERR_SHAPE, "input shapes do not broadcast");
    if (flags & KILN_BIN_UNIDIR) {
        ok = nd == a->ndim && memcmp(dims, a->dims, sizeof(int64_t) * (size_t)nd) == 0;
        KILN_OP_CHECK(c, ok, KILN_ERR_SHAPE,
                      "input 1 does not broadcast to input 0's shape (unidirectional)");
    }
    kiln_tensor_set_shape(c->out[0], (flags & KILN_BIN_OUT_BOOL) ? KILN_BOOL : a->dtype, nd,
                          dims);
    return KILN_OK;
}

kiln_status kiln_variadic_infer(kiln_op_ctx *c, unsigned flags) {
    KILN_OP_CHECK(c, c->n_in >= 1, KILN_ERR_INVALID_ARGUMENT, "needs at least one input");
    for (int i = 0; i < c->n_in; i++) {
        KILN_OP_CHECK(c, c->in[i], KILN_ERR_INVALID_ARGUMENT, "input %d is missing", i);
        kiln_status st = check_dtype(c, i, flags);
        if (st != KILN_OK) return st;
        KILN_OP_CHECK(c, c->in[i]->dtype == c->in[0]->dtype, KILN_ERR_TYPE,
                      "input dtypes differ: input 0 is %s, input %d is %s",
                      kiln_dtype_name(c->in[0]->dtype), i, kiln_dtype_name(c->in[i]->dtype));
    }
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    KILN_OP_CHECK(c, kiln_bcast_shape_n(c->n_in, (const kiln_tensor *const *)c->in, &nd, dims),
                  KILN_ERR_SHAPE, "input shapes do not broadcast");
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, nd, dims);
    return KILN_OK;
}

/* ------------------------------------------------------------ forward */

typedef struct job {
    const kiln_binary_kernels *k;
    const kiln_tensor *a, *b;
    kiln_tensor *y;
} job;

static void chunk_f32(const kiln_bcast_chunk *ch, void *arg) {
    const job *j = arg;
    const size_t ysz = kiln_dtype_size(j->y->dtype);
    j->k->row_f32((char *)j->y->data + (size_t)ch->y * ysz,
                  (const float *)j->a->data + ch->off[0], (const float *)j->b->data + ch->off[1],
                  ch->n, ch->inc[0], ch->inc[1]);
}

static void chunk_f64(const kiln_bcast_chunk *ch, void *arg) {
    const job *j = arg;
    for (int64_t i = 0; i < ch->n; i++) {
        double v = j->k->f64(kiln_get_f64(j->a, ch->off[0] + i * ch->inc[0]),
                             kiln_get_f64(j->b, ch->off[1] + i * ch->inc[1]));
        kiln_set_f64(j->y, ch->y + i, v); /* to an integer y: truncated, saturated */
    }
}

static void chunk_i64(const kiln_bcast_chunk *ch, void *arg) {
    const job *j = arg;
    const bool uns = !kiln_dtype_is_signed(j->a->dtype);
    for (int64_t i = 0; i < ch->n; i++) {
        int64_t v = j->k->i64(kiln_get_i64(j->a, ch->off[0] + i * ch->inc[0]),
                              kiln_get_i64(j->b, ch->off[1] + i * ch->inc[1]), uns);
        kiln_set_i64(j->y, ch->y + i, v);
    }
}

void kiln_binary_apply(const kiln_binary_kernels *k, const kiln_tensor *a,
                       const kiln_tensor *b, kiln_tensor *y) {
    const kiln_tensor *in[2] = {a, b};
    kiln_bcast p;
    kiln_bcast_init(&p, y->ndim, y->dims, 2, in);
    job j = {k, a, b, y};
    if (a->dtype == KILN_F32 && b->dtype == KILN_F32 && k->row_f32)
        kiln_bcast_run(&p, chunk_f32, &j);
    else if (kiln_dtype_is_float(a->dtype) || kiln_dtype_is_float(b->dtype))
        kiln_bcast_run(&p, chunk_f64, &j);
    else
        kiln_bcast_run(&p, chunk_i64, &j);
}

kiln_status kiln_binary_forward(kiln_op_ctx *c, const kiln_binary_kernels *k) {
    kiln_binary_apply(k, c->in[0], c->in[1], c->out[0]);
    return KILN_OK;
}

kiln_status kiln_variadic_forward(kiln_op_ctx *c, const kiln_binary_kernels *k) {
    kiln_tensor *y = c->out[0];
    if (c->n_in == 1) { /* the output has the one input's shape and dtype */
        memcpy(y->data, c->in[0]->data, kiln_tensor_nbytes(c->in[0]));
        return KILN_OK;
    }
    /* y's shape covers every input's, so later steps read y in place. */
    kiln_binary_apply(k, c->in[0], c->in[1], y);
    for (int i = 2; i < c->n_in; i++) kiln_binary_apply(k, y, c->in[i], y);
    return KILN_OK;
}

/* ------------------------------------------------------------ gradients */

kiln_status kiln_binary_grad_input(kiln_grad_ctx *g, int k, int grad) {
    if (grad < 0) return KILN_ERR_OUT_OF_MEMORY;
    g->dx[k] = kiln_grad_unbroadcast(g, grad, KILN_GRAD_IN(g, k));
    return g->dx[k] < 0 ? KILN_ERR_OUT_OF_MEMORY : KILN_OK;
}

kiln_status kiln_binary_grad_all(kiln_grad_ctx *g, int grad) {
    for (int k = 0; k < KILN_GRAD_NODE(g)->n_in; k++) {
        if (!g->need[k]) continue;
        kiln_status st = kiln_binary_grad_input(g, k, grad);
        if (st) return st;
    }
    return KILN_OK;
}

kiln_status kiln_binary_grad_check(kiln_grad_ctx *g) {
    const kiln_node *n = KILN_GRAD_NODE(g);
    for (int k = 0; k < n->n_in; k++) {
        if (!g->need[k]) continue;
        const kiln_value *v = &g->m->values[n->in[k]];
        if (v->dtype && !kiln_dtype_is_float(v->dtype))
            return kiln_fail(g->m->ctx, KILN_ERR_UNSUPPORTED,
                             "%s node '%s': input %d ('%s') is %s and has no gradient", n->op_type,
                             n->name, k, v->name, kiln_dtype_name(v->dtype));
    }
    return KILN_OK;
}

int kiln_binary_grad_scalar(kiln_grad_ctx *g, double v, int like) {
    kiln_model *m = g->m;
    kiln_tensor *t = kiln_tensor_new(m->ctx, KILN_F64, 0, NULL);
    if (!t) return -1;
    kiln_set_f64(t, 0, v);
    char name[64];
    snprintf(name, sizeof name, "grad:const#%d", m->n_values);
    kiln_status st = kiln_model_add_initializer(m, name, t);
    kiln_tensor_free(t);
    if (st) return -1;
    int in[2] = {kiln_model_find_value(m, name), like};
    return kiln_grad_emit(g, NULL, "CastLike", 2, in, 1, NULL, false, NULL);
}

kiln_status kiln_select_grad_rule(kiln_grad_ctx *g, const char *grad_op) {
    kiln_status st = kiln_binary_grad_check(g);
    if (st) return st;
    const int n_in = KILN_GRAD_NODE(g)->n_in;
    int in[2 + 16];
    in[0] = g->dy[0];
    in[1] = KILN_GRAD_OUT(g, 0);
    for (int k = 0; k < n_in; k++) in[2 + k] = KILN_GRAD_IN(g, k);
    for (int k = 0; k < n_in; k++) {
        if (!g->need[k]) continue;
        char attr[32];
        snprintf(attr, sizeof attr, "index=%d", k);
        /* inputs after X_k are not read: leave them out so they need not stay alive */
        st = kiln_binary_grad_input(g, k, kiln_grad_emit(g, "kiln", grad_op, 3 + k, in, 1, NULL,
                                                          false, attr));
        if (st) return st;
    }
    return KILN_OK;
}

kiln_status kiln_select_grad_infer(kiln_op_ctx *c) {
    KILN_OP_CHECK(c, c->n_in >= 3, KILN_ERR_INVALID_ARGUMENT, "needs dY, Y and inputs");
    const kiln_tensor *dy = c->in[0], *y = c->in[1];
    const int64_t k = kiln_attr_int(c->node, "index", -1);
    KILN_OP_CHECK(c, k >= 0 && k < c->n_in - 2, KILN_ERR_INVALID_ARGUMENT,
                  "attribute 'index' = %lld names no input (%d given)", (long long)k, c->n_in - 2);
    KILN_OP_CHECK(c, kiln_dtype_is_float(dy->dtype), KILN_ERR_TYPE, "dY must be a float tensor");
    KILN_OP_CHECK(c, y->ndim == dy->ndim && kiln_numel(y->ndim, y->dims) == kiln_tensor_numel(dy) &&
                     memcmp(y->dims, dy->dims, sizeof(int64_t) * (size_t)y->ndim) == 0,
                  KILN_ERR_SHAPE, "dY and Y must have one shape");
    for (int i = 2; i < c->n_in; i++) {
        const kiln_tensor *x = c->in[i];
        KILN_OP_CHECK(c, x && x->dtype == y->dtype, KILN_ERR_TYPE, "input %d must have Y's dtype", i);
        int nd;
        int64_t dims[KILN_MAX_DIMS];
        bool ok = kiln_broadcast_shape(x->ndim, x->dims, y->ndim, y->dims, &nd, dims) &&
                  nd == y->ndim && memcmp(dims, y->dims, sizeof(int64_t) * (size_t)nd) == 0;
        KILN_OP_CHECK(c, ok, KILN_ERR_SHAPE, "input %d does not broadcast to Y's shape", i);
    }
    kiln_tensor_set_shape(c->out[0], dy->dtype, dy->ndim, dy->dims);
    return KILN_OK;
}

/* Selected: x is Y's value; NaN selects the NaN inputs, which is what the forward kept. */
static inline bool selected(double x, double y) { return x == y || (x != x && y != y); }

typedef struct select_job {
    const kiln_tensor *dy, *y, *x;
    kiln_tensor *out;
} select_job;

/* out = X_k selected ? dY : 0 (inputs dY, Y, X_k) */
static void select_first(const kiln_bcast_chunk *ch, void *arg) {
    const select_job *j = arg;
    if (j->dy->dtype == KILN_F32 && j->x->dtype == KILN_F32) {
        const float *dyp = (const float *)j->dy->data + ch->off[0];
        const float *yp = (const float *)j->y->data + ch->off[1];
        const float *xp = (const float *)j->x->data + ch->off[2];
        float *op = (float *)j->out->data + ch->y;
        for (int64_t i = 0; i < ch->n; i++) {
            const float x = xp[i * ch->inc[2]], y = yp[i * ch->inc[1]];
            op[i] = (x == y || (x != x && y != y)) ? dyp[i * ch->inc[0]] : 0.0f;
        }
        return;
    }
    for (int64_t i = 0; i < ch->n; i++) {
        double x = kiln_get_f64(j->x, ch->off[2] + i * ch->inc[2]);
        double y = kiln_get_f64(j->y, ch->off[1] + i * ch->inc[1]);
        kiln_set_f64(j->out, ch->y + i,
                     selected(x, y) ? kiln_get_f64(j->dy, ch->off[0] + i * ch->inc[0]) : 0.0);
    }
}

/* out = X_j selected ? 0 : out, for an earlier input j (inputs Y, X_j) */
static void select_clear(const kiln_bcast_chunk *ch, void *arg) {
    const select_job *j = arg;
    if (j->out->dtype == KILN_F32 && j->x->dtype == KILN_F32) {
        const float *yp = (const float *)j->y->data + ch->off[0];
        const float *xp = (const float *)j->x->data + ch->off[1];
        float *op = (float *)j->out->data + ch->y;
        for (int64_t i = 0; i < ch->n; i++) {
            const float x = xp[i * ch->inc[1]], y = yp[i * ch->inc[0]];
            if (x == y || (x != x && y != y)) op[i] = 0.0f;
        }
        return;
    }
    for (int64_t i = 0; i < ch->n; i++) {
        double x = kiln_get_f64(j->x, ch->off[1] + i * ch->inc[1]);
        double y = kiln_get_f64(j->y, ch->off[0] + i * ch->inc[0]);
        if (selected(x, y)) kiln_set_f64(j->out, ch->y + i, 0.0);
    }
}

kiln_status kiln_select_grad_forward(kiln_op_ctx *c) {
    const int k = (int)kiln_attr_int(c->node, "index", 0);
    kiln_tensor *out = c->out[0];
    select_job j = {c->in[0], c->in[1], c->in[2 + k], out};
    kiln_bcast p;
    const kiln_tensor *first[3] = {j.dy, j.y, j.x};
    kiln_bcast_init(&p, out->ndim, out->dims, 3, first);
    kiln_bcast_run(&p, select_first, &j);
    /* ties go to the first input: drop the elements an earlier input already takes */
    for (int i = 0; i < k; i++) {
        j.x = c->in[2 + i];
        const kiln_tensor *earlier[2] = {j.y, j.x};
        kiln_bcast_init(&p, out->ndim, out->dims, 2, earlier);
        kiln_bcast_run(&p, select_clear, &j);
    }
    return KILN_OK;
}

#ifdef KILN_OPTESTS
kiln_tensor *kiln_binary_rand_signed(int ndim, const int64_t *dims, double lo, double hi,
                                     uint64_t seed) {
    kiln_tensor *t = kt_rand(KILN_F64, ndim, dims, lo, hi, seed);
    kiln_tensor *s = kt_rand(KILN_F64, ndim, dims, -1, 1, seed ^ 0x5bd1e995u);
    if (!t || !s) {
        kiln_tensor_free(t);
        kiln_tensor_free(s);
        return NULL;
    }
    double *tp = t->data;
    const double *sp = s->data;
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++)
        if (sp[i] < 0) tp[i] = -tp[i];
    kiln_tensor_free(s);
    return t;
}
#endif /* KILN_OPTESTS */
