/*
 * attention.c — kiln.Attention (internal op, domain "kiln"): scaled dot-product attention
 * with optional additive biases, reading Q, K, V through strided views and writing its
 * output through one (the view programs: src/ops/attention.h):
 *
 *     out[n, i, :] = sum_j softmax_j(scale * <q[n, i, :], k[n, j, :]> + bias[n, i, j]) v[n, j, :]
 *
 * n the flat batch index (batch and heads); with L2NORM steps (Swin V2's cosine attention)
 * q and / or k are rows divided by max(||row||_2, eps), and a tensor-valued SCALE makes
 * scale a factor per n (a per-head logit scale). Inputs: Q, K, V sources (one float dtype: f32,
 * f16, bf16, f64), biases 3 and 4 (optional, any float dtype, broadcast), then the value
 * inputs the programs name (Reshape shapes, scale factors). Attributes: q_view, k_view,
 * v_view, s_view, o_view (INTS programs), scale (float, default 1). The output has Q's
 * dtype. The reference accumulates in double; device kernels compute the softmax and the
 * sums in f32 whatever the I/O dtype. Made by the fuse-attention pass
 * (src/passes/fuse_attention.c) from MatMul -> [scale] -> [bias] -> Softmax -> MatMul chains;
 * never in an ONNX file, not differentiable (the pass runs on inference graphs only).
 */
#include "attention.h"
#include "../core/optest.h"

#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

/* A strided view whose dims may each stand for several (size, stride) atoms, row-major
 * within the dim: a merge of dims that no single stride expresses (the heads of a packed
 * in-projection merged with the batch: (N, H) with strides (3E, D)) stays exact, so a
 * later split back (a Reshape to (N, H, L, D)) finds the strides again. Dims of size 1
 * hold no atom. */
#define MAX_ATOMS 8
typedef struct view {
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    int na[KILN_MAX_DIMS];
    int64_t asz[KILN_MAX_DIMS][MAX_ATOMS], ast[KILN_MAX_DIMS][MAX_ATOMS];
    int64_t off;
} view;

static void view_of(view *v, const kiln_tensor *t) {
    int64_t str[KILN_MAX_DIMS];
    kiln_strides(t->ndim, t->dims, str);
    v->nd = t->ndim;
    v->off = 0;
    for (int d = 0; d < t->ndim; d++) {
        v->dims[d] = t->dims[d];
        v->na[d] = t->dims[d] != 1;
        v->asz[d][0] = t->dims[d];
        v->ast[d][0] = str[d];
    }
}

/* Merge neighbouring atoms of dim d that one stride covers. */
static void coalesce(view *v, int d) {
    int w = 0;
    for (int i = 0; i < v->na[d]; i++) {
        if (w > 0 && v->ast[d][w - 1] == v->ast[d][i] * v->asz[d][i]) {
            v->asz[d][w - 1] *= v->asz[d][i];
            v->ast[d][w - 1] = v->ast[d][i];
            continue;
        }
        v->asz[d][w] = v->asz[d][i];
        v->ast[d][w++] = v->ast[d][i];
    }
    v->na[d] = w;
}

/* v viewed as shape (nd, nd_dims): the atoms, in order, split where a new dim's bound falls
 * inside one. False when the sizes do not divide (or an empty tensor). */
static bool view_reshape(view *v, int nd, const int64_t *nd_dims) {
    const int64_t numel = kiln_numel(v->nd, v->dims);
    if (numel != kiln_numel(nd, nd_dims) || numel == 0) return false;
    int64_t lsz[KILN_MAX_DIMS * MAX_ATOMS], lst[KILN_MAX_DIMS * MAX_ATOMS];
    int n = 0;
    for (int d = 0; d < v->nd; d++)
        for (int i = 0; i < v->na[d]; i++) {
            if (n > 0 && lst[n - 1] == v->ast[d][i] * v->asz[d][i]) {
                lsz[n - 1] *= v->asz[d][i];
                lst[n - 1] = v->ast[d][i];
                continue;
            }
            lsz[n] = v->asz[d][i];
            lst[n++] = v->ast[d][i];
        }
    view w = {.nd = nd, .off = v->off};
    int ai = 0;
    for (int j = 0; j < nd; j++) {
        w.dims[j] = nd_dims[j];
        int64_t need = nd_dims[j];
        while (need > 1) {
            if (ai >= n || w.na[j] == MAX_ATOMS) return false;
            const int64_t sz = lsz[ai], st = lst[ai];
            if (sz <= need) {
                if (need % sz) return false;
                w.asz[j][w.na[j]] = sz;
                w.ast[j][w.na[j]++] = st;
                need /= sz;
                ai++;
            } else {
                if (sz % need) return false;
                w.asz[j][w.na[j]] = need;
                w.ast[j][w.na[j]++] = st * (sz / need);
                lsz[ai] = sz / need;
                need = 1;
            }
        }
    }
    if (ai != n) return false;
    *v = w;
    return true;
}

/* The one stride of dim d (0 for a dim of size 1); false when its atoms need several. */
static bool one_stride(view *v, int d, int64_t *st) {
    coalesce(v, d);
    if (v->na[d] > 1) return false;
    *st = v->na[d] ? v->ast[d][0] : 0;
    return true;
}

/* The value input p's data as integers (at most max). */
static kiln_status param_ints(kiln_op_ctx *c, kiln_tensor *const *t, int64_t p, int64_t *out, int max, int *n) {
    KILN_OP_CHECK(c, p >= KILN_ATTN_FIRST_PARAM && p < c->n_in && t[p] && t[p]->data, KILN_ERR_INVALID_ARGUMENT,
                  "a view program names input %" PRId64 ", which is not a value input of the node", p);
    const int64_t k = kiln_tensor_numel(t[p]);
    KILN_OP_CHECK(c, kiln_dtype_is_int(t[p]->dtype) && k <= max, KILN_ERR_SHAPE,
                  "input %" PRId64 " must hold at most %d integers", p, max);
    for (int64_t i = 0; i < k; i++) out[i] = kiln_get_i64(t[p], i);
    *n = (int)k;
    return KILN_OK;
}

static kiln_status param_float(kiln_op_ctx *c, kiln_tensor *const *t, int64_t p, double *out) {
    KILN_OP_CHECK(c, p >= KILN_ATTN_FIRST_PARAM && p < c->n_in && t[p] && t[p]->data, KILN_ERR_INVALID_ARGUMENT,
                  "a view program names input %" PRId64 ", which is not a value input of the node", p);
    KILN_OP_CHECK(c, kiln_tensor_numel(t[p]) == 1, KILN_ERR_SHAPE, "scale input %" PRId64 " is not a scalar", p);
    *out = kiln_get_f64(t[p], 0);
    return KILN_OK;
}

/* ONNX Reshape's target dims of an input of shape (ind, in) to `shape`. */
static kiln_status reshape_dims(kiln_op_ctx *c, int ind, const int64_t *in, const int64_t *shape, int n, bool allowzero,
                                int64_t *out) {
    int infer_at = -1;
    int64_t known = 1;
    for (int d = 0; d < n; d++) {
        out[d] = shape[d];
        if (shape[d] == -1 && infer_at < 0) {
            infer_at = d;
            continue;
        }
        KILN_OP_CHECK(c, shape[d] >= 0, KILN_ERR_SHAPE, "a view's Reshape has shape[%d] = %" PRId64, d, shape[d]);
        if (shape[d] == 0 && !allowzero) {
            KILN_OP_CHECK(c, d < ind, KILN_ERR_SHAPE, "a view's Reshape copies dim %d of a rank-%d view", d, ind);
            out[d] = in[d];
        }
        known *= out[d];
    }
    const int64_t numel = kiln_numel(ind, in);
    if (infer_at >= 0) {
        KILN_OP_CHECK(c, known > 0 && numel % known == 0, KILN_ERR_SHAPE, "a view's Reshape has no integer -1");
        out[infer_at] = numel / known;
    } else {
        KILN_OP_CHECK(c, known == numel, KILN_ERR_SHAPE, "a view's Reshape changes the element count");
    }
    return KILN_OK;
}

/* Remove axis a of v. */
static void drop_axis(view *v, int a) {
    for (int d = a; d + 1 < v->nd; d++) {
        v->dims[d] = v->dims[d + 1];
        v->na[d] = v->na[d + 1];
        memcpy(v->asz[d], v->asz[d + 1], sizeof v->asz[d]);
        memcpy(v->ast[d], v->ast[d + 1], sizeof v->ast[d]);
    }
    v->nd--;
}

/* Move dim d of src to dim e of dst. */
static void move_dim(view *dst, int e, const view *src, int d) {
    dst->dims[e] = src->dims[d];
    dst->na[e] = src->na[d];
    memcpy(dst->asz[e], src->asz[d], sizeof dst->asz[e]);
    memcpy(dst->ast[e], src->ast[d], sizeof dst->ast[e]);
}

/* One step of a program at ops[*at] applied to v (shape only when shape_only). RESHAPE
 * to a view the strides cannot express fails with KILN_ERR_UNSUPPORTED. */
static kiln_status step(kiln_op_ctx *c, kiln_tensor *const *t, const char *what, const int64_t *ops, int nops, int *at,
                        view *v, double *scale, bool shape_only) {
    const int i = *at;
    const int64_t op = ops[i];
#define NEED(k) KILN_OP_CHECK(c, i + (k) < nops, KILN_ERR_INVALID_ARGUMENT, "%s is cut short at %d", what, i)
    if (op == KILN_ATTN_RESHAPE) {
        NEED(2);
        int64_t shape[KILN_MAX_DIMS], dims[KILN_MAX_DIMS];
        int n = 0;
        kiln_status st = param_ints(c, t, ops[i + 1], shape, KILN_MAX_DIMS, &n);
        if (!st) st = reshape_dims(c, v->nd, v->dims, shape, n, ops[i + 2] != 0, dims);
        if (st) return st;
        if (shape_only) {
            v->nd = n;
            memcpy(v->dims, dims, (size_t)n * sizeof *dims);
        } else if (!view_reshape(v, n, dims)) {
            return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "%s: a Reshape at step %d is not a view of the strides", what,
                                i);
        }
        *at = i + 3;
    } else if (op == KILN_ATTN_TRANSPOSE) {
        NEED(1);
        const int64_t n = ops[i + 1];
        KILN_OP_CHECK(c, n == v->nd && i + 1 + n < nops, KILN_ERR_SHAPE, "%s: a Transpose of rank %" PRId64
                      " on a rank-%d view", what, n, v->nd);
        view w = *v;
        bool seen[KILN_MAX_DIMS] = {false};
        for (int d = 0; d < n; d++) {
            const int64_t p = ops[i + 2 + d];
            KILN_OP_CHECK(c, p >= 0 && p < n && !seen[p], KILN_ERR_INVALID_ARGUMENT, "%s: bad Transpose perm", what);
            seen[p] = true;
            move_dim(&w, d, v, (int)p);
        }
        *v = w;
        *at = i + 2 + (int)n;
    } else if (op == KILN_ATTN_GATHER) {
        NEED(2);
        int64_t a = ops[i + 1], idx = ops[i + 2];
        KILN_OP_CHECK(c, kiln_norm_axis(&a, v->nd), KILN_ERR_SHAPE, "%s: Gather axis out of range", what);
        if (idx < 0) idx += v->dims[a];
        KILN_OP_CHECK(c, idx >= 0 && idx < v->dims[a], KILN_ERR_SHAPE, "%s: Gather index %" PRId64
                      " out of range for dim %" PRId64, what, ops[i + 2], v->dims[a]);
        for (int k = v->na[a] - 1; k >= 0; k--) {
            v->off += (idx % v->asz[a][k]) * v->ast[a][k];
            idx /= v->asz[a][k];
        }
        drop_axis(v, (int)a);
        *at = i + 3;
    } else if (op == KILN_ATTN_SQUEEZE || op == KILN_ATTN_UNSQUEEZE) {
        NEED(1);
        const int64_t n = ops[i + 1];
        KILN_OP_CHECK(c, n >= 0 && i + 1 + n < nops, KILN_ERR_INVALID_ARGUMENT, "%s is cut short at %d", what, i);
        if (op == KILN_ATTN_SQUEEZE) {
            bool drop[KILN_MAX_DIMS] = {false};
            for (int k = 0; k < n; k++) {
                int64_t a = ops[i + 2 + k];
                KILN_OP_CHECK(c, kiln_norm_axis(&a, v->nd) && v->dims[a] == 1, KILN_ERR_SHAPE,
                              "%s: Squeeze of an axis that is not 1", what);
                drop[a] = true;
            }
            for (int d = v->nd - 1; d >= 0; d--)
                if (drop[d]) drop_axis(v, d);
        } else {
            const int r = v->nd + (int)n;
            KILN_OP_CHECK(c, r <= KILN_MAX_DIMS, KILN_ERR_SHAPE, "%s: Unsqueeze past rank 8", what);
            bool ins[KILN_MAX_DIMS] = {false};
            for (int k = 0; k < n; k++) {
                int64_t a = ops[i + 2 + k];
                KILN_OP_CHECK(c, kiln_norm_axis(&a, r) && !ins[a], KILN_ERR_SHAPE, "%s: bad Unsqueeze axes", what);
                ins[a] = true;
            }
            view w = {.nd = r, .off = v->off};
            for (int d = 0, s = 0; d < r; d++) {
                if (ins[d]) {
                    w.dims[d] = 1;
                    w.na[d] = 0;
                } else {
                    move_dim(&w, d, v, s++);
                }
            }
            *v = w;
        }
        *at = i + 2 + (int)n;
    } else if (op == KILN_ATTN_SLICE || op == KILN_ATTN_SLICE_P) {
        NEED(3);
        int64_t a = ops[i + 1], s = ops[i + 2], e = ops[i + 3];
        if (op == KILN_ATTN_SLICE_P) {
            int ns = 0, ne = 0;
            kiln_status st = param_ints(c, t, ops[i + 2], &s, 1, &ns);
            if (!st) st = param_ints(c, t, ops[i + 3], &e, 1, &ne);
            if (st) return st;
            KILN_OP_CHECK(c, ns == 1 && ne == 1, KILN_ERR_SHAPE, "%s: a Slice's start or end is not one integer", what);
        }
        KILN_OP_CHECK(c, kiln_norm_axis(&a, v->nd), KILN_ERR_SHAPE, "%s: Slice axis out of range", what);
        const int64_t dim = v->dims[a];
        if (s < 0) s += dim;
        if (e < 0) e += dim;
        s = s < 0 ? 0 : s > dim ? dim : s;
        e = e < 0 ? 0 : e > dim ? dim : e;
        const int64_t len = e > s ? e - s : 0;
        if (len != dim && !shape_only) {
            int64_t st = 0;
            KILN_OP_CHECK(c, one_stride(v, (int)a, &st), KILN_ERR_UNSUPPORTED,
                          "%s: a Slice at step %d cuts a dim that no one stride covers", what, i);
            v->off += s * st;
            v->na[a] = len != 1;
            v->asz[a][0] = len;
            v->ast[a][0] = st;
        }
        v->dims[a] = len;
        *at = i + 4;
    } else if (op == KILN_ATTN_SCALE || op == KILN_ATTN_RSCALE) {
        NEED(1);
        double f = 1;
        kiln_status st = param_float(c, t, ops[i + 1], &f);
        if (st) return st;
        *scale = op == KILN_ATTN_SCALE ? *scale * f : *scale / f;
        *at = i + 2;
    } else {
        return kiln_op_fail(c, KILN_ERR_INVALID_ARGUMENT, "%s: unknown step %" PRId64 " at %d", what, op, i);
    }
#undef NEED
    return KILN_OK;
}

/* An operand's address from its view: batch dims first (all their atoms), then the row
 * and column axes, each of one stride; false when one needs several. */
static bool make_addr(view *v, int row, int col, kiln_attn_addr *a) {
    a->nb = 0;
    for (int d = 0; d < v->nd - 2; d++)
        for (int i = 0; i < v->na[d]; i++) {
            if (a->nb > 0 && a->bstr[a->nb - 1] == v->ast[d][i] * v->asz[d][i]) {
                a->bdims[a->nb - 1] *= v->asz[d][i];
                a->bstr[a->nb - 1] = v->ast[d][i];
                continue;
            }
            if (a->nb == KILN_MAX_DIMS) return false;
            a->bdims[a->nb] = v->asz[d][i];
            a->bstr[a->nb++] = v->ast[d][i];
        }
    a->off = v->off;
    return one_stride(v, row, &a->rs) && one_stride(v, col, &a->cs);
}

/* An L2NORM step of a q_view / k_view: the normalized dim (size, one stride) at that step. */
typedef struct norm_at {
    bool on;
    double eps;
    int64_t size, stride;
} norm_at;

static kiln_status run_prog(kiln_op_ctx *c, kiln_tensor *const *t, const char *attr, view *v, double *scale,
                            norm_at *nm) {
    int nops = 0;
    const int64_t *ops = kiln_attr_ints(c->node, attr, &nops);
    for (int at = 0; at < nops;) {
        KILN_OP_CHECK(c, ops[at] != KILN_ATTN_BIAS, KILN_ERR_INVALID_ARGUMENT, "%s: a bias step outside s_view", attr);
        if (ops[at] == KILN_ATTN_L2NORM) {
            KILN_OP_CHECK(c, nm && !nm->on && at + 1 < nops && v->nd >= 1, KILN_ERR_INVALID_ARGUMENT,
                          "%s: an L2NORM step at %d (one per program, on Q or K only)", attr, at);
            kiln_status st = param_float(c, t, ops[at + 1], &nm->eps);
            if (st) return st;
            KILN_OP_CHECK(c, nm->eps >= 0 && isfinite(nm->eps), KILN_ERR_INVALID_ARGUMENT,
                          "%s: L2NORM's eps %g is not a finite value >= 0", attr, nm->eps);
            nm->size = v->dims[v->nd - 1];
            KILN_OP_CHECK(c, one_stride(v, v->nd - 1, &nm->stride), KILN_ERR_UNSUPPORTED,
                          "%s: the dim L2NORM normalizes at step %d needs more than one stride", attr, at);
            nm->on = true;
            at += 2;
            continue;
        }
        kiln_status st = step(c, t, attr, ops, nops, &at, v, scale, false);
        if (st) return st;
    }
    return KILN_OK;
}

static bool float_dt(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16 || t == KILN_F64; }

/* A tensor-valued SCALE / RSCALE of the scores s (input p, host data): a factor per flat
 * batch index, the tensor broadcast onto s with size 1 in its last two dims. */
static kiln_status tensor_scale(kiln_op_ctx *c, const kiln_tensor *f, int p, bool recip, const view *s,
                                kiln_attn_geom *g) {
    const int64_t k = kiln_tensor_numel(f);
    KILN_OP_CHECK(c, g->n_hs == 0 && f->data && float_dt(f->dtype) && k >= 1 && k <= KILN_ATTN_MAX_HS &&
                         f->ndim <= s->nd,
                  KILN_ERR_UNSUPPORTED, "s_view: scale input %d (%" PRId64 " elements) must be the one tensor scale, "
                  "float, at most %d elements, of rank at most the scores' %d", p, k, KILN_ATTN_MAX_HS, s->nd);
    view fv = {.nd = s->nd};
    int64_t fs[KILN_MAX_DIMS];
    kiln_strides(f->ndim, f->dims, fs);
    for (int d = 0; d < s->nd; d++) {
        const int fd = d - (s->nd - f->ndim);
        const int64_t n = fd >= 0 ? f->dims[fd] : 1;
        KILN_OP_CHECK(c, n == 1 || (n == s->dims[d] && d < s->nd - 2), KILN_ERR_SHAPE, "s_view: scale input %d does "
                      "not broadcast to the scores with size 1 in their last two dims (dim %d: %" PRId64 " vs %" PRId64
                      ")", p, d, n, s->dims[d]);
        fv.dims[d] = s->dims[d];
        fv.na[d] = s->dims[d] != 1;
        fv.asz[d][0] = s->dims[d];
        fv.ast[d][0] = n == 1 ? 0 : fs[fd];
    }
    KILN_OP_CHECK(c, make_addr(&fv, s->nd - 2, s->nd - 1, &g->hsa), KILN_ERR_UNSUPPORTED,
                  "s_view: scale input %d: too many batch dims", p);
    for (int64_t i = 0; i < k; i++) {
        const double x = kiln_get_f64(f, i);
        g->hs[i] = (float)(recip ? 1.0 / x : x);
    }
    g->n_hs = (int)k;
    return KILN_OK;
}

kiln_status kiln_attention_resolve(kiln_op_ctx *c, kiln_tensor *const *t, kiln_attn_geom *g) {
    memset(g, 0, sizeof *g);
    KILN_OP_CHECK(c, c->n_in >= 3 && t[0] && t[1] && t[2], KILN_ERR_INVALID_ARGUMENT, "Q, K and V are required");
    const kiln_dtype dt = t[0]->dtype;
    KILN_OP_CHECK(c, float_dt(dt) && t[1]->dtype == dt && t[2]->dtype == dt, KILN_ERR_TYPE,
                  "Q, K and V must share one float dtype (f32, f16, bf16, f64)");
    double scale = kiln_attr_float(c->node, "scale", 1.0f);
    view q, k, v;
    view_of(&q, t[0]);
    view_of(&k, t[1]);
    view_of(&v, t[2]);
    norm_at qn = {0}, kn = {0};
    kiln_status st = run_prog(c, t, "q_view", &q, &scale, &qn);
    if (!st) st = run_prog(c, t, "k_view", &k, &scale, &kn);
    if (!st) st = run_prog(c, t, "v_view", &v, &scale, NULL);
    if (st) return st;
    KILN_OP_CHECK(c, q.nd >= 2 && k.nd == q.nd && v.nd >= 2, KILN_ERR_SHAPE,
                  "Q (rank %d) and K^T (rank %d) must share a rank >= 2, V (rank %d) at least 2", q.nd, k.nd, v.nd);
    const int r = q.nd;
    for (int d = 0; d < r - 2; d++)
        KILN_OP_CHECK(c, q.dims[d] == k.dims[d], KILN_ERR_SHAPE, "Q's and K's batch dim %d differ (%" PRId64
                      " vs %" PRId64 ")", d, q.dims[d], k.dims[d]);
    g->lq = q.dims[r - 2];
    g->d = q.dims[r - 1];
    g->lk = k.dims[r - 1];
    KILN_OP_CHECK(c, k.dims[r - 2] == g->d, KILN_ERR_SHAPE, "Q has %" PRId64 " columns, K^T %" PRId64 " rows", g->d,
                  k.dims[r - 2]);
    KILN_OP_CHECK(c, make_addr(&q, r - 2, r - 1, &g->q) && make_addr(&k, r - 1, r - 2, &g->k), KILN_ERR_UNSUPPORTED,
                  "Q's or K's rows or columns need more than one stride");
    /* an L2NORM must have normalized what is the head dim now */
    KILN_OP_CHECK(c, !qn.on || (qn.size == g->d && (g->d == 1 || qn.stride == g->q.cs)), KILN_ERR_UNSUPPORTED,
                  "q_view: the dim L2NORM normalizes (%" PRId64 " elements, stride %" PRId64 ") is not Q's head dim "
                  "(%" PRId64 ", stride %" PRId64 ")", qn.size, qn.stride, g->d, g->q.cs);
    KILN_OP_CHECK(c, !kn.on || (kn.size == g->d && (g->d == 1 || kn.stride == g->k.cs)), KILN_ERR_UNSUPPORTED,
                  "k_view: the dim L2NORM normalizes (%" PRId64 " elements, stride %" PRId64 ") is not K's head dim "
                  "(%" PRId64 ", stride %" PRId64 ")", kn.size, kn.stride, g->d, g->k.cs);
    g->q_norm = qn.on;
    g->q_eps = (float)qn.eps;
    g->k_norm = kn.on;
    g->k_eps = (float)kn.eps;
    g->nbatch = kiln_numel(r - 2, q.dims);
    /* the scores' program */
    view s = {.nd = r};
    memcpy(s.dims, q.dims, sizeof s.dims);
    s.dims[r - 1] = g->lk;
    int nops = 0;
    const int64_t *ops = kiln_attr_ints(c->node, "s_view", &nops);
    for (int at = 0; at < nops;) {
        if (ops[at] == KILN_ATTN_BIAS) {
            KILN_OP_CHECK(c, at + 1 < nops && (ops[at + 1] == 0 || ops[at + 1] == 1) && !g->has_bias[ops[at + 1]],
                          KILN_ERR_INVALID_ARGUMENT, "s_view: bad bias step at %d", at);
            const int slot = (int)ops[at + 1];
            const kiln_tensor *b = slot + 3 < c->n_in ? t[slot + 3] : NULL;
            KILN_OP_CHECK(c, b && float_dt(b->dtype), KILN_ERR_INVALID_ARGUMENT, "bias %d (input %d) is missing or not "
                          "a float tensor", slot, slot + 3);
            KILN_OP_CHECK(c, b->ndim <= s.nd, KILN_ERR_SHAPE, "bias %d has rank %d, the scores %d", slot, b->ndim, s.nd);
            view bv = {.nd = s.nd};
            int64_t bs[KILN_MAX_DIMS];
            kiln_strides(b->ndim, b->dims, bs);
            for (int d = 0; d < s.nd; d++) {
                const int bd = d - (s.nd - b->ndim);
                const int64_t n = bd >= 0 ? b->dims[bd] : 1;
                KILN_OP_CHECK(c, n == 1 || n == s.dims[d], KILN_ERR_SHAPE, "bias %d does not broadcast to the scores "
                              "(dim %d: %" PRId64 " vs %" PRId64 ")", slot, d, n, s.dims[d]);
                bv.dims[d] = s.dims[d];
                bv.na[d] = s.dims[d] != 1;
                bv.asz[d][0] = s.dims[d];
                bv.ast[d][0] = n == 1 ? 0 : bs[bd];
            }
            KILN_OP_CHECK(c, make_addr(&bv, s.nd - 2, s.nd - 1, &g->bias[slot]), KILN_ERR_UNSUPPORTED,
                          "bias %d: too many batch dims", slot);
            g->has_bias[slot] = true;
            at += 2;
            continue;
        }
        KILN_OP_CHECK(c, ops[at] == KILN_ATTN_RESHAPE || ((ops[at] == KILN_ATTN_SCALE || ops[at] == KILN_ATTN_RSCALE) &&
                                                          !g->has_bias[0] && !g->has_bias[1]),
                      KILN_ERR_INVALID_ARGUMENT, "s_view: step %" PRId64 " at %d is not allowed on the scores", ops[at],
                      at);
        if (ops[at] != KILN_ATTN_RESHAPE && at + 1 < nops && ops[at + 1] >= KILN_ATTN_FIRST_PARAM &&
            ops[at + 1] < c->n_in && t[ops[at + 1]] && kiln_tensor_numel(t[ops[at + 1]]) != 1) {
            st = tensor_scale(c, t[ops[at + 1]], (int)ops[at + 1], ops[at] == KILN_ATTN_RSCALE, &s, g);
            if (st) return st;
            at += 2;
            continue;
        }
        st = step(c, t, "s_view", ops, nops, &at, &s, &scale, true);
        if (st) return st;
        KILN_OP_CHECK(c, s.nd >= 2 && s.dims[s.nd - 2] == g->lq && s.dims[s.nd - 1] == g->lk, KILN_ERR_SHAPE,
                      "s_view: a Reshape of the scores must keep (Lq, Lk) last");
    }
    KILN_OP_CHECK(c, v.nd == s.nd, KILN_ERR_SHAPE, "V has rank %d, the probabilities %d", v.nd, s.nd);
    for (int d = 0; d < s.nd - 2; d++)
        KILN_OP_CHECK(c, v.dims[d] == s.dims[d], KILN_ERR_SHAPE, "V's batch dim %d is %" PRId64 ", the scores' %" PRId64,
                      d, v.dims[d], s.dims[d]);
    KILN_OP_CHECK(c, v.dims[v.nd - 2] == g->lk, KILN_ERR_SHAPE, "V has %" PRId64 " rows, K %" PRId64,
                  v.dims[v.nd - 2], g->lk);
    g->dv = v.dims[v.nd - 1];
    KILN_OP_CHECK(c, make_addr(&v, v.nd - 2, v.nd - 1, &g->v), KILN_ERR_UNSUPPORTED,
                  "V's rows or columns need more than one stride");
    g->scale = (float)scale;
    /* the output: O (batch'..., Lq, Dv) through o_view, forward for the shapes ... */
    view o = {.nd = s.nd};
    memcpy(o.dims, s.dims, sizeof o.dims);
    o.dims[o.nd - 1] = g->dv;
    ops = kiln_attr_ints(c->node, "o_view", &nops);
    int starts[64], nsteps = 0;
    struct {
        int nd;
        int64_t dims[KILN_MAX_DIMS];
    } shapes[64];
    for (int at = 0; at < nops;) {
        KILN_OP_CHECK(c, nsteps < 64 && (ops[at] == KILN_ATTN_RESHAPE || ops[at] == KILN_ATTN_TRANSPOSE ||
                                         ops[at] == KILN_ATTN_SQUEEZE || ops[at] == KILN_ATTN_UNSQUEEZE),
                      KILN_ERR_INVALID_ARGUMENT, "o_view: step %" PRId64 " at %d is not allowed on the output", ops[at],
                      at);
        starts[nsteps] = at;
        shapes[nsteps].nd = o.nd;
        memcpy(shapes[nsteps++].dims, o.dims, sizeof o.dims);
        double unused = 1;
        st = step(c, t, "o_view", ops, nops, &at, &o, &unused, true);
        if (st) return st;
    }
    g->out_ndim = o.nd;
    memcpy(g->out_dims, o.dims, sizeof g->out_dims);
    /* ... and backward for the strides of O in the output */
    kiln_tensor ot = {0};
    kiln_tensor_set_shape(&ot, KILN_F32, o.nd, o.dims);
    view_of(&o, &ot);
    for (int k2 = nsteps - 1; k2 >= 0; k2--) {
        if (ops[starts[k2]] == KILN_ATTN_TRANSPOSE) {
            view w = o;
            for (int d = 0; d < o.nd; d++) move_dim(&w, (int)ops[starts[k2] + 2 + d], &o, d);
            o = w;
        } else if (!view_reshape(&o, shapes[k2].nd, shapes[k2].dims)) {
            return kiln_op_fail(c, KILN_ERR_UNSUPPORTED, "o_view: step %d is not a view of the output's strides",
                                starts[k2]);
        }
    }
    KILN_OP_CHECK(c, make_addr(&o, o.nd - 2, o.nd - 1, &g->o), KILN_ERR_UNSUPPORTED,
                  "the output's rows or columns need more than one stride");
    return KILN_OK;
}

static kiln_status infer(kiln_op_ctx *c) {
    kiln_attn_geom g;
    kiln_status st = kiln_attention_resolve(c, c->in, &g);
    if (st) return st;
    kiln_tensor_set_shape(c->out[0], c->in[0]->dtype, g.out_ndim, g.out_dims);
    return KILN_OK;
}

/* A row of Lk scores and one of Dv sums (doubles) per thread. */
static size_t workspace(const kiln_op_ctx *c) {
    kiln_attn_geom g;
    kiln_op_ctx cc = *c;
    kiln_context quiet = {0};
    cc.kctx = &quiet;
    if (kiln_attention_resolve(&cc, c->in, &g)) return 0;
    const int nt = kiln_cpu_threads() > 0 ? kiln_cpu_threads() : 1;
    return (size_t)nt * (size_t)(g.lk + g.dv + 1) * sizeof(double);
}

static inline double ld(const void *p, kiln_dtype dt, int64_t i) {
    switch (dt) {
    case KILN_F32: return ((const float *)p)[i];
    case KILN_F64: return ((const double *)p)[i];
    case KILN_F16: return kiln_f16_to_f32(((const uint16_t *)p)[i]);
    case KILN_BF16: return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0;
    }
}

static inline void st_(void *p, kiln_dtype dt, int64_t i, double x) {
    switch (dt) {
    case KILN_F32: ((float *)p)[i] = (float)x; break;
    case KILN_F64: ((double *)p)[i] = x; break;
    case KILN_F16: ((uint16_t *)p)[i] = kiln_f32_to_f16((float)x); break;
    case KILN_BF16: ((uint16_t *)p)[i] = kiln_f32_to_bf16((float)x); break;
    default: break;
    }
}

/* 1 / max(L2 norm, eps) of the n elements at p + k * stride (1 when !on). */
static double rnorm(bool on, double eps, const void *p, kiln_dtype dt, int64_t base, int64_t stride, int64_t n) {
    if (!on) return 1;
    double ss = 0;
    for (int64_t k = 0; k < n; k++) {
        const double x = ld(p, dt, base + k * stride);
        ss += x * x;
    }
    const double nrm = sqrt(ss);
    return 1 / (nrm > eps ? nrm : eps);
}

/* One query row i of batch n into O. */
static void attend_row(const kiln_attn_geom *g, kiln_dtype dt, const void *Q, const void *K, const void *V,
                       const kiln_tensor *const *B, void *O, int64_t n, int64_t i, double *row, double *acc) {
    const int64_t qb = kiln_attn_base(&g->q, n) + i * g->q.rs, kb = kiln_attn_base(&g->k, n),
                  vb = kiln_attn_base(&g->v, n), ob = kiln_attn_base(&g->o, n) + i * g->o.rs;
    int64_t bb[2] = {0, 0};
    for (int s = 0; s < 2; s++)
        if (B[s]) bb[s] = kiln_attn_base(&g->bias[s], n) + i * g->bias[s].rs;
    const double sc = (double)g->scale * (double)kiln_attn_hs(g, n) *
                      rnorm(g->q_norm, g->q_eps, Q, dt, qb, g->q.cs, g->d);
    double mx = -INFINITY;
    for (int64_t j = 0; j < g->lk; j++) {
        double dot = 0;
        for (int64_t d = 0; d < g->d; d++) dot += ld(Q, dt, qb + d * g->q.cs) * ld(K, dt, kb + j * g->k.rs + d * g->k.cs);
        dot *= sc * rnorm(g->k_norm, g->k_eps, K, dt, kb + j * g->k.rs, g->k.cs, g->d);
        for (int s = 0; s < 2; s++)
            if (B[s]) dot += ld(B[s]->data, B[s]->dtype, bb[s] + j * g->bias[s].cs);
        row[j] = dot;
        if (dot > mx) mx = dot;
    }
    double sum = 0;
    for (int64_t j = 0; j < g->lk; j++) {
        row[j] = mx == -INFINITY ? 0 : exp(row[j] - mx);
        sum += row[j];
    }
    for (int64_t d = 0; d < g->dv; d++) acc[d] = 0;
    for (int64_t j = 0; j < g->lk; j++)
        for (int64_t d = 0; d < g->dv; d++) acc[d] += row[j] * ld(V, dt, vb + j * g->v.rs + d * g->v.cs);
    for (int64_t d = 0; d < g->dv; d++) st_(O, dt, ob + d * g->o.cs, sum > 0 ? acc[d] / sum : NAN);
}

static kiln_status forward(kiln_op_ctx *c) {
    kiln_attn_geom g;
    kiln_status st = kiln_attention_resolve(c, c->in, &g);
    if (st) return st;
    const kiln_dtype dt = c->in[0]->dtype;
    const void *Q = c->in[0]->data, *K = c->in[1]->data, *V = c->in[2]->data;
    const kiln_tensor *B[2] = {g.has_bias[0] ? c->in[3] : NULL, g.has_bias[1] ? c->in[4] : NULL};
    void *O = c->out[0]->data;
    const size_t per = (size_t)(g.lk + g.dv + 1);
    /* a plan hands every node its one shared workspace, sized for its largest user: the rows
     * it holds bound the threads, and so does the thread setting (num_threads(n) starts n
     * threads; maxvit_t's plan gave 50,000 and libgomp ran out of threads) */
    const size_t fit = c->workspace_size / (per * sizeof(double));
    const int nt = omp_in_parallel() ? 1 : kiln_cpu_threads() > 0 ? kiln_cpu_threads() : 1;
    const int slots = fit < (size_t)nt ? (int)fit : nt;
    if (g.nbatch * g.lq == 0) return KILN_OK;
    if (slots < 1) return kiln_op_fail(c, KILN_ERR_INTERNAL, "workspace too small");
    const int64_t rows = g.nbatch * g.lq;
    double *ws = c->workspace;
#pragma omp parallel for num_threads(slots) if (slots > 1 && rows * g.lk * g.d > (1 << 16)) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        double *row = ws + (size_t)omp_get_thread_num() * per;
        attend_row(&g, dt, Q, K, V, B, O, r / g.lq, r % g.lq, row, row + g.lk);
    }
    return KILN_OK;
}

static double flops(const kiln_op_ctx *c) {
    kiln_attn_geom g;
    kiln_op_ctx cc = *c;
    kiln_context quiet = {0};
    cc.kctx = &quiet;
    if (kiln_attention_resolve(&cc, c->in, &g)) return 0;
    return 2.0 * (double)g.nbatch * (double)g.lq * (double)g.lk * (double)(g.d + g.dv);
}

#ifdef KILN_OPTESTS
static kiln_tensor *shape_t(int n, const int64_t *v) {
    double d[KILN_MAX_DIMS];
    for (int i = 0; i < n; i++) d[i] = (double)v[i];
    return kt_make(KILN_I64, 1, KT_DIMS(n), d);
}

static int test(void) {
    int fails = 0;
    /* one head, D = 1: q = (1, 0), k = (1, 2), v = (10, 20). Row 0: softmax(1, 2) =
     * (0.2689414, 0.7310586) -> 17.310586; row 1: softmax(0, 0) -> 15. K given as
     * (B, H, Lk, D) with the transpose to K^T in k_view. */
    {
        kiln_tensor *in[3] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 1), KT_VALS(1, 0)),
                              kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 1), KT_VALS(1, 2)),
                              kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 1), KT_VALS(10, 20))};
        kiln_tensor *y = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 1), KT_VALS(17.3105858, 15));
        fails += kiln_optest("Attention", "k_view=[2,4,0,1,3,2]", 3, in, 1, &y, 1e-6, 1e-6,
                             "attention by hand, D = 1");
    }
    /* the same with K given as K^T, scale 2 as a value input (SCALE in q_view) and a bias
     * (0, -1; 0, 0): row 0 scores (2, 4) + (0, -1) = (2, 3) -> 17.310586 again; row 1 15 */
    {
        kiln_tensor *in[6] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 1), KT_VALS(1, 0)),
                              kt_make(KILN_F32, 4, KT_DIMS(1, 1, 1, 2), KT_VALS(1, 2)),
                              kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 1), KT_VALS(10, 20)),
                              kt_make(KILN_F32, 2, KT_DIMS(2, 2), KT_VALS(0, -1, 0, 0)), NULL, kt_scalar(KILN_F32, 2)};
        kiln_tensor *y = kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 1), KT_VALS(17.3105858, 15));
        fails += kiln_optest("Attention", "q_view=[7,5];s_view=[9,0]", 6, in, 1, &y, 1e-6, 1e-6,
                             "attention by hand, scale input and bias");
    }
    /* Large enough for the threaded path (rows * Lk * D over 2^16): every value row is
     * (1, 2, ..., 8), so each output row is that whatever the softmax weights. The harness
     * runs it again with a workspace 8 MiB larger, as a plan's shared one: the same bits,
     * and no more threads than the thread setting (it once took one thread per row the
     * workspace held). */
    {
        const int64_t Lb = 128, Db = 8;
        kiln_tensor *v = kt_make(KILN_F32, 4, KT_DIMS(1, 2, Lb, Db), NULL);
        kiln_tensor *y = kt_make(KILN_F32, 4, KT_DIMS(1, 2, Lb, Db), NULL);
        for (int64_t i = 0; i < 2 * Lb * Db; i++) {
            kiln_set_f64(v, i, (double)(i % Db + 1));
            kiln_set_f64(y, i, (double)(i % Db + 1));
        }
        kiln_tensor *in[3] = {kt_rand(KILN_F32, 4, KT_DIMS(1, 2, Lb, Db), -1, 1, 9100),
                              kt_rand(KILN_F32, 4, KT_DIMS(1, 2, Db, Lb), -1, 1, 9099), v};
        fails += kiln_optest("Attention", "", 3, in, 1, &y, 1e-5, 1e-6, "attention, threaded rows, constant values");
    }
    /* ViT's packed in-projection (L, N, 3E) with E = H * D: q, k, v selected by Reshape to
     * (L, N, 3, H, D), Gather on axis 2 and Transposes; the output written through the
     * head merge (L, N, H, D) -> (L * N, E). */
    const int64_t L = 7, N = 2, H = 2, D = 32;
    {
        const int64_t s5[5] = {L, N, 3, H, D}, s2[2] = {L * N, H * D};
        char attrs[400];
        snprintf(attrs, sizeof attrs,
                 "q_view=[1,5,0,3,2,0,2,4,1,2,0,3];k_view=[1,5,0,3,2,1,2,4,1,2,3,0];"
                 "v_view=[1,5,0,3,2,2,2,4,1,2,0,3];o_view=[2,4,2,0,1,3,1,6,0];scale=0.1767767");
        kiln_tensor *in[7] = {kt_rand(KILN_F32, 3, KT_DIMS(L, N, 3 * H * D), -1, 1, 9101), NULL, NULL, NULL, NULL,
                              shape_t(5, s5), shape_t(2, s2)};
        in[1] = kiln_tensor_clone(NULL, in[0]);
        in[2] = kiln_tensor_clone(NULL, in[0]);
        fails += kiln_optest_sweep("Attention", attrs, 0, 7, in, 1, "ViT packed q/k/v views, output view");
    }
    /* Swin: relative-position bias (H, L, L), then the shifted-window mask (nW, 1, L, L) added
     * with the scores viewed as (B/nW, nW, H, L, L); q, k, v from (3, B, H, L, D) by Gather. */
    {
        const int64_t B = 4, nW = 2, Lw = 49;
        const int64_t s5[5] = {B / nW, nW, H, Lw, Lw}, s4[4] = {-1, H, Lw, Lw};
        kiln_tensor *in[7] = {kt_rand(KILN_F32, 5, KT_DIMS(3, B, H, Lw, D), -1, 1, 9102), NULL, NULL,
                              kt_rand(KILN_F32, 3, KT_DIMS(H, Lw, Lw), -2, 2, 9103),
                              kt_rand(KILN_F32, 4, KT_DIMS(nW, 1, Lw, Lw), -3, 0, 9104), shape_t(5, s5), shape_t(4, s4)};
        in[1] = kiln_tensor_clone(NULL, in[0]);
        in[2] = kiln_tensor_clone(NULL, in[0]);
        fails += kiln_optest_sweep("Attention",
                                   "q_view=[3,0,0];k_view=[3,0,1,2,4,0,1,3,2];v_view=[3,0,2];"
                                   "s_view=[9,0,1,5,0,9,1,1,6,0];scale=0.17677669",
                                   0, 7, in, 1, "Swin window attention, bias and shifted-window mask");
    }
    /* Lq != Lk, D = 64, a broadcast bias (1, 1, Lq, Lk) and plain operands */
    {
        kiln_tensor *in[4] = {kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 5, 64), -1, 1, 9105),
                              kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 64, 9), -1, 1, 9106),
                              kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 9, 64), -1, 1, 9107),
                              kt_rand(KILN_F32, 4, KT_DIMS(1, 1, 5, 9), -1, 1, 9108)};
        fails += kiln_optest_sweep("Attention", "s_view=[9,0];scale=0.125", 0, 4, in, 1,
                                   "Lq != Lk, D = 64, broadcast bias");
    }
    /* ViT-B's sequence: L = 197, D = 64, rank-3 (N * H, L, D) operands */
    {
        kiln_tensor *in[3] = {kt_rand(KILN_F32, 3, KT_DIMS(3, 197, 64), -1, 1, 9109),
                              kt_rand(KILN_F32, 3, KT_DIMS(3, 197, 64), -1, 1, 9110),
                              kt_rand(KILN_F32, 3, KT_DIMS(3, 197, 64), -1, 1, 9111)};
        fails += kiln_optest_sweep("Attention", "k_view=[2,3,0,2,1];scale=0.125", 0, 3, in, 1,
                                   "L = 197, D = 64, rank 3");
    }
    /* a negative scale: the flash kernel's unfolded softmax (with a positive scale and no
     * biases or norms it applies the scale inside the exponential) */
    {
        kiln_tensor *in[3] = {kt_rand(KILN_F32, 3, KT_DIMS(2, 70, 32), -1, 1, 9146),
                              kt_rand(KILN_F32, 3, KT_DIMS(2, 70, 32), -1, 1, 9147),
                              kt_rand(KILN_F32, 3, KT_DIMS(2, 70, 32), -1, 1, 9148)};
        fails += kiln_optest_sweep("Attention", "k_view=[2,3,0,2,1];scale=-0.25", 0, 3, in, 1,
                                   "L = 70, D = 32, negative scale");
    }
    /* ViT-H/14's head dim 80 at its sequence (L = 257), and 48 (head dims that are multiples
     * of 16 but not powers of two: the flash kernel's k-steps of 16, its 8-wide n-tiles) */
    {
        kiln_tensor *in[3] = {kt_rand(KILN_F32, 3, KT_DIMS(2, 257, 80), -1, 1, 9140),
                              kt_rand(KILN_F32, 3, KT_DIMS(2, 257, 80), -1, 1, 9141),
                              kt_rand(KILN_F32, 3, KT_DIMS(2, 257, 80), -1, 1, 9142)};
        fails += kiln_optest_sweep("Attention", "k_view=[2,3,0,2,1];scale=0.1118034", 0, 3, in, 1,
                                   "L = 257, D = 80 (ViT-H), rank 3");
    }
    {
        kiln_tensor *in[3] = {kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 90, 48), -1, 1, 9143),
                              kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 75, 48), -1, 1, 9144),
                              kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 75, 48), -1, 1, 9145)};
        fails += kiln_optest_sweep("Attention", "k_view=[2,4,0,1,3,2];scale=0.14433757", 0, 3, in, 1,
                                   "Lq 90, Lk 75, D = 48");
    }
    /* Cases for the CUDA flash kernel (attention_flash.cu: f16 / bf16, D a multiple of 16 from 32 to 128, keys
     * in tiles of 64, query rows in tiles of 64): ViT-B's head dim in the packed
     * in-projection views (6 batch x heads, L = 197 not a multiple of 64); Lq 100 and Lk 130
     * with a bias broadcast over the batch; D = 128 with the output transposed (element
     * stores, not pairs); rows masked to -inf in whole or in the
     * first key tile only (the online softmax starting from -inf; a fully masked row gives
     * NaN, as here). */
    {
        const int64_t Lv = 197, Nv = 2, Hv = 3, Dv = 64;
        const int64_t s5[5] = {Lv, Nv, 3, Hv, Dv}, s2[2] = {Lv * Nv, Hv * Dv};
        kiln_tensor *in[7] = {kt_rand(KILN_F32, 3, KT_DIMS(Lv, Nv, 3 * Hv * Dv), -1, 1, 9114), NULL, NULL, NULL, NULL,
                              shape_t(5, s5), shape_t(2, s2)};
        in[1] = kiln_tensor_clone(NULL, in[0]);
        in[2] = kiln_tensor_clone(NULL, in[0]);
        fails += kiln_optest_sweep("Attention",
                                   "q_view=[1,5,0,3,2,0,2,4,1,2,0,3];k_view=[1,5,0,3,2,1,2,4,1,2,3,0];"
                                   "v_view=[1,5,0,3,2,2,2,4,1,2,0,3];o_view=[2,4,2,0,1,3,1,6,0];scale=0.125",
                                   0, 7, in, 1, "ViT-B head dim 64, L = 197, packed q/k/v views");
    }
    {
        kiln_tensor *in[4] = {kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 100, 64), -1, 1, 9115),
                              kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 130, 64), -1, 1, 9116),
                              kt_rand(KILN_F32, 4, KT_DIMS(2, 3, 130, 64), -1, 1, 9117),
                              kt_rand(KILN_F32, 4, KT_DIMS(1, 3, 100, 130), -2, 2, 9118)};
        fails += kiln_optest_sweep("Attention", "k_view=[2,4,0,1,3,2];s_view=[9,0];scale=0.125", 0, 4, in, 1,
                                   "Lq 100, Lk 130, D = 64, bias broadcast over the batch");
    }
    {
        kiln_tensor *in[3] = {kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 70, 128), -1, 1, 9119),
                              kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 70, 128), -1, 1, 9120),
                              kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 70, 128), -1, 1, 9121)};
        fails += kiln_optest_sweep("Attention", "k_view=[2,4,0,1,3,2];o_view=[2,4,0,1,3,2];scale=0.0883883", 0, 3,
                                   in, 1, "L = 70, D = 128, output written transposed (column stride 70)");
    }
    {
        kiln_tensor *in[4] = {kt_rand(KILN_F32, 4, KT_DIMS(1, 1, 3, 32), -1, 1, 9122),
                              kt_rand(KILN_F32, 4, KT_DIMS(1, 1, 70, 32), -1, 1, 9123),
                              kt_rand(KILN_F32, 4, KT_DIMS(1, 1, 70, 32), -1, 1, 9124),
                              kt_rand(KILN_F32, 2, KT_DIMS(3, 70), -2, 2, 9125)};
        for (int j = 0; j < 70; j++) {
            kiln_set_f64(in[3], 70 + j, -INFINITY);
            if (j < 64) kiln_set_f64(in[3], 140 + j, -INFINITY);
        }
        fails += kiln_optest_sweep("Attention", "k_view=[2,4,0,1,3,2];s_view=[9,0];scale=0.17677669", 0, 4, in, 1,
                                   "rows masked to -inf: all keys, the first 64 keys");
    }
    /* Q sliced at column 4 of 40: rows not 16-byte aligned (the flash kernel refuses them; the
     * other kernels read element by element) */
    {
        kiln_tensor *in[3] = {kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 16, 40), -1, 1, 9126),
                              kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 16, 32), -1, 1, 9127),
                              kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 16, 32), -1, 1, 9128)};
        fails += kiln_optest_sweep("Attention", "q_view=[6,3,4,36];k_view=[2,4,0,1,3,2];scale=0.17677669", 0, 3, in, 1,
                                   "Q sliced at column 4: rows off 16-byte alignment");
    }
    /* a Slice (step 1) view: q and k from one tensor's halves along D */
    {
        kiln_tensor *in[3] = {kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 16, 64), -1, 1, 9112), NULL,
                              kt_rand(KILN_F32, 4, KT_DIMS(1, 2, 16, 32), -1, 1, 9113)};
        in[1] = kiln_tensor_clone(NULL, in[0]);
        fails += kiln_optest_sweep("Attention", "q_view=[6,3,0,32];k_view=[6,-1,32,64,2,4,0,1,3,2]", 0, 3, in, 1,
                                   "q and k sliced from one tensor");
    }
    /* cosine attention (Swin V2): q and k rows L2-normalized (L2NORM, eps input 5), the
     * scores times a per-head factor (a tensor SCALE, input 6: (H, 1, 1) = (1, 10)). q = (3, 4)
     * -> (0.6, 0.8); k rows (1, 0), (0, 2) -> (1, 0), (0, 1); v = (10, 20). Head 0: scores
     * (0.6, 0.8) -> 10 + 10 * sigmoid(0.2) = 15.498340; head 1: (6, 8) -> 10 + 10 * sigmoid(2)
     * = 18.807971. */
    {
        kiln_tensor *in[7] = {kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 2), KT_VALS(3, 4, 3, 4)),
                              kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(1, 0, 0, 2, 1, 0, 0, 2)),
                              kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 1), KT_VALS(10, 20, 10, 20)), NULL, NULL,
                              kt_scalar(KILN_F32, 1e-12), kt_make(KILN_F32, 3, KT_DIMS(2, 1, 1), KT_VALS(1, 10))};
        kiln_tensor *y = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 1), KT_VALS(15.4983401, 18.8079708));
        fails += kiln_optest("Attention", "q_view=[11,5];k_view=[11,5,2,4,0,1,3,2];s_view=[7,6]", 7, in, 1, &y, 1e-6,
                             1e-6, "cosine attention by hand: L2NORM on q and k, a per-head scale");
    }
    /* an RSCALE tensor divides; a zero row stays zero (x / max(0, eps)): q = 0 gives uniform
     * weights, (10 + 20) / 2 = 15 in both heads */
    {
        kiln_tensor *in[7] = {kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 2), KT_VALS(0, 0, 0, 0)),
                              kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 2), KT_VALS(1, 0, 0, 2, 1, 0, 0, 2)),
                              kt_make(KILN_F32, 4, KT_DIMS(1, 2, 2, 1), KT_VALS(10, 20, 10, 20)), NULL, NULL,
                              kt_scalar(KILN_F32, 1e-12), kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 1), KT_VALS(0.5, 4))};
        kiln_tensor *y = kt_make(KILN_F32, 4, KT_DIMS(1, 2, 1, 1), KT_VALS(15, 15));
        fails += kiln_optest("Attention", "q_view=[11,5];k_view=[11,5,2,4,0,1,3,2];s_view=[8,6]", 7, in, 1, &y, 1e-6,
                             1e-6, "cosine attention: a zero q row, an RSCALE tensor");
    }
    /* Swin V2's window attention as torchvision writes it (L = 64, D = 32: the flash kernel's
     * tile): q, k, v gathered from (3, B, H, L, D), q and k normalized (k before its
     * transpose), the per-head logit scale, the relative-position bias and the shifted-window
     * mask */
    {
        const int64_t B = 4, nW = 2, Lw = 64, Hs = 3;
        const int64_t s5[5] = {B / nW, nW, Hs, Lw, Lw}, s4[4] = {-1, Hs, Lw, Lw};
        kiln_tensor *in[9] = {kt_rand(KILN_F32, 5, KT_DIMS(3, B, Hs, Lw, D), -1, 1, 9129), NULL, NULL,
                              kt_rand(KILN_F32, 3, KT_DIMS(Hs, Lw, Lw), -2, 2, 9130),
                              kt_rand(KILN_F32, 4, KT_DIMS(nW, 1, Lw, Lw), -3, 0, 9131), shape_t(5, s5), shape_t(4, s4),
                              kt_scalar(KILN_F32, 1e-12), kt_rand(KILN_F32, 3, KT_DIMS(Hs, 1, 1), 1, 12, 9132)};
        in[1] = kiln_tensor_clone(NULL, in[0]);
        in[2] = kiln_tensor_clone(NULL, in[0]);
        fails += kiln_optest_sweep("Attention",
                                   "q_view=[3,0,0,11,7];k_view=[3,0,1,11,7,2,4,0,1,3,2];v_view=[3,0,2];"
                                   "s_view=[7,8,9,0,1,5,0,9,1,1,6,0]",
                                   0, 9, in, 1, "Swin V2 cosine window attention, logit scale, bias and mask");
    }
    /* rejected: L2NORM of a dim that is not the head dim (normalized, then transposed into
     * the rows); a tensor scale that varies along the keys */
    {
        kiln_tensor *in[6] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL), kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL),
                              kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL), NULL, NULL, kt_scalar(KILN_F32, 1e-12)};
        fails += kiln_optest_fails("Attention", "q_view=[11,5,2,4,0,1,3,2]", 6, in, 1, KILN_ERR_UNSUPPORTED,
                                   "L2NORM of Q's rows dim");
    }
    {
        kiln_tensor *in[6] = {kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL), kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL),
                              kt_make(KILN_F32, 4, KT_DIMS(1, 1, 2, 2), NULL), NULL, NULL,
                              kt_make(KILN_F32, 2, KT_DIMS(1, 2), KT_VALS(1, 2))};
        fails += kiln_optest_fails("Attention", "s_view=[7,5]", 6, in, 1, KILN_ERR_SHAPE,
                                   "a tensor scale along the keys");
    }
    /* rejected: K's batch differs from Q's; a Reshape that is no view (a merge across a
     * transposed pair of dims) */
    {
        kiln_tensor *in[3] = {kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), NULL), kt_make(KILN_F32, 3, KT_DIMS(3, 4, 3), NULL),
                              kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), NULL)};
        fails += kiln_optest_fails("Attention", "", 3, in, 1, KILN_ERR_SHAPE, "batch of Q and K differ");
    }
    {
        const int64_t s2[2] = {6, 4};
        kiln_tensor *in[6] = {kt_make(KILN_F32, 3, KT_DIMS(2, 3, 4), NULL), kt_make(KILN_F32, 2, KT_DIMS(4, 3), NULL),
                              kt_make(KILN_F32, 2, KT_DIMS(3, 4), NULL), NULL, NULL, shape_t(2, s2)};
        fails += kiln_optest_fails("Attention", "q_view=[2,3,1,0,2,1,5,0]", 6, in, 1, KILN_ERR_UNSUPPORTED,
                                   "a Reshape that is not a view");
    }
    return fails;
}
#endif /* KILN_OPTESTS */

const kiln_op_def kiln_op_attention = {
    /* computes in the low precision (its softmax and sums in f32 inside); the biases and
     * the value inputs (scale factors) stay f32 */
    .precision = KILN_PREC_LOW, .f32_inputs = ~7u,
    .name = "Attention", .domain = "kiln", .min_inputs = 3, .max_inputs = 32, .min_outputs = 1, .max_outputs = 1,
    .value_inputs = ~31u, .infer = infer, .cpu_forward = forward, .cpu_workspace = workspace, .flops = flops,
    .test = KILN_OP_TESTS(test),
};
