/*
 * fuse_attention.c — scaled dot-product attention as one kiln.Attention node
 * (KILN_PASS_FUSE_ATTENTION; the op: src/ops/attention.c, its view programs:
 * src/ops/attention.h).
 *
 * Matched, whatever the exporter (torch's MHA / SDPA export in ViT, Swin's and MaxViT's
 * written-out attention, hand-built graphs):
 *
 *   S = MatMul(Qv, Kv)  [-> Mul / Div by a scalar, or by one tensor of per-head factors
 *       (size 1 in the last two dims: Swin V2's logit scale)]  [-> Add bias, Reshape of the batch
 *       dims, Add bias]  -> Softmax (last axis)  [-> Reshape]  -> MatMul(., Vv) -> O
 *
 * where Qv, Kv and Vv are each a chain of views (Reshape, Transpose, Gather with a scalar
 * index, Squeeze, Unsqueeze, Slice with step 1, Split, Identity; on Qv and Kv also a Mul /
 * Div by a scalar, the sqrt(scale) that torch's SDPA export puts on q and on k^T, and
 * torch's F.normalize(x, dim=-1) as ReduceL2 -> Clip -> [Expand ->] Div, Swin V2's cosine
 * attention, when the normalized dim is the head dim) of a real
 * producer's output, and O is followed by a chain of Transpose / Reshape / Squeeze /
 * Unsqueeze (the head merge). The scalars must be known when a plan is built (constants or
 * computed from shapes: they become value inputs of the node); the intermediate values
 * from S to O and the output chain's must have no other reader. The chains become the
 * node's programs; the view chains' nodes go when nothing else reads them (shape
 * computations that read them are folded by the planner, which then skips them).
 *
 * Refused (the pattern stays as it is) when a chain is not expressible as strides for the
 * shapes of both shape probes (symbolic dims as 1 and as 3), trying shorter chains first,
 * or when the session's backend does not support the node for those shapes (the CUDA
 * kernel's head-dim and sequence limits): the backend's supports is asked here, so a
 * refused node is never planned onto the CPU.
 */
#include "passes.h"
#include "../core/backend.h"
#include "../ops/attention.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REC 12      /* view steps per chain */
#define MAX_REC_OPS 40  /* ints of one node's steps */
#define MAX_PARAMS (32 - KILN_ATTN_FIRST_PARAM)

typedef struct rec {
    int node;   /* the view node */
    int from;   /* its input on the source side (the chain's source when cut here) */
    int64_t ops[MAX_REC_OPS];
    int nops;
} rec;

/* A chain of view steps, in backward order (rec[0] next to the product). */
typedef struct chain {
    rec r[MAX_REC];
    int n;
} chain;

typedef struct match {
    int params[MAX_PARAMS], n_params;
    int bias[2], n_bias;
    chain q, k, v, o;  /* o in forward order */
    int64_t s_ops[128];
    int s_n;
    int dead[64], n_dead; /* nodes that go (the score chain, Softmax, both MatMuls) */
    int m1, m2;
    bool k_transposed; /* the first product takes K, not K^T (an Einsum) */
} match;

typedef struct ctx {
    kiln_model *m;
    int *prod;
    signed char *known; /* memo of plan_known: 0 unknown, 1 yes, 2 no */
    kiln_tensor *vt[2]; /* the probes' values (shapes; small values' data) */
} ctx;

/* Whether v's value is known when a plan is built: constants and what is computed from
 * them and from shapes. */
static bool plan_known(ctx *x, int v, int depth) {
    if (v < 0) return true;
    if (x->known[v]) return x->known[v] == 1;
    const kiln_value *val = &x->m->values[v];
    bool k = false;
    if (val->init) k = true;
    else if (val->is_input || x->prod[v] < 0 || depth > 48) k = false;
    else {
        const kiln_node *n = &x->m->nodes[x->prod[v]];
        const kiln_op_def *d = kiln_node_def(n);
        k = d && !d->random;
        for (int i = 0; k && i < n->n_in; i++)
            if (!kiln_input_in_mask(d->shape_only_inputs, i)) k = plan_known(x, n->in[i], depth + 1);
    }
    x->known[v] = k ? 1 : 2;
    return k;
}

static const kiln_tensor *probe(const ctx *x, int p, int v) { return &x->vt[p][v]; }

/* v has a float scalar (one element, both probes) of rank at most `rank`. */
static bool scalar(const ctx *x, int v, int rank) {
    for (int p = 0; p < 2; p++) {
        const kiln_tensor *t = probe(x, p, v);
        if (t->ndim < 0 || t->ndim > rank || kiln_numel(t->ndim, t->dims) != 1 || !kiln_dtype_is_float(t->dtype))
            return false;
    }
    return true;
}

static bool same_dims(const kiln_tensor *a, const kiln_tensor *b) {
    if (a->ndim < 0 || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

/* v is a float tensor (the same in both probes) of at most KILN_ATTN_MAX_HS elements that
 * broadcasts onto the scores s (rank `rank`) with size 1 in their last two dims: a factor
 * per batch index (Swin V2's per-head logit scale). */
static bool batch_factor(const ctx *x, int v, int s) {
    const kiln_tensor *a = probe(x, 0, v), *b = probe(x, 1, v);
    if (!same_dims(a, b) || !kiln_dtype_is_float(a->dtype) || kiln_numel(a->ndim, a->dims) > KILN_ATTN_MAX_HS)
        return false;
    for (int p = 0; p < 2; p++) {
        const kiln_tensor *sc = probe(x, p, s);
        if (sc->ndim < 2 || a->ndim > sc->ndim) return false;
        for (int d = 0; d < a->ndim; d++) {
            const int sd = d + sc->ndim - a->ndim;
            if (a->dims[d] != 1 && (sd >= sc->ndim - 2 || a->dims[d] != sc->dims[sd])) return false;
        }
    }
    return true;
}

static int param(match *mt, int v) {
    for (int i = 0; i < mt->n_params; i++)
        if (mt->params[i] == v) return KILN_ATTN_FIRST_PARAM + i;
    if (mt->n_params == MAX_PARAMS) return -1;
    mt->params[mt->n_params++] = v;
    return KILN_ATTN_FIRST_PARAM + mt->n_params - 1;
}

/* The integers of constant v (at most max); false when v is no integer constant. */
static bool const_ints(const ctx *x, int v, int64_t *out, int max, int *n) {
    const kiln_tensor *t = kiln_pass_constant(x->m, x->prod, v);
    if (!t || !kiln_dtype_is_int(t->dtype) || kiln_tensor_numel(t) > max) return false;
    *n = (int)kiln_tensor_numel(t);
    for (int i = 0; i < *n; i++) out[i] = kiln_get_i64(t, i);
    return true;
}

/* An axes list from attribute (older opsets) or input 1. */
static bool axes_of(const ctx *x, const kiln_node *n, int64_t *axes, int *na, bool *absent) {
    int c = 0;
    const int64_t *a = kiln_attr_ints(n, "axes", &c);
    *absent = false;
    if (a) {
        if (c > KILN_MAX_DIMS) return false;
        memcpy(axes, a, (size_t)c * sizeof *a);
        *na = c;
        return true;
    }
    const int in1 = kiln_pass_opt_in(n, 1);
    if (in1 < 0) {
        *absent = true;
        *na = 0;
        return true;
    }
    return const_ints(x, in1, axes, KILN_MAX_DIMS, na);
}

/* The node producing v when it is op (and v's only reader is `reader`), else NULL. */
static const kiln_node *producer_is(const ctx *x, int v, const char *op, int reader) {
    if (v < 0 || x->prod[v] < 0 || kiln_pass_single_consumer(x->m, v) != reader) return NULL;
    const kiln_node *n = &x->m->nodes[x->prod[v]];
    return kiln_pass_is(n, op) ? n : NULL;
}

/* Div node p (output rank `rank`) as torch's F.normalize(x, dim=-1): x / Expand(Clip(
 * ReduceL2(x, axes=[-1], keepdims=1), min=eps)) (the Expand optional, Max(norm, eps) for the
 * Clip); *x_out its x, *eps the value holding eps (a scalar known at plan time). */
static bool l2_normalize(ctx *x, int p, int rank, int *x_out, int *eps) {
    const kiln_node *n = &x->m->nodes[p];
    /* op-pattern: F.normalize as torch.onnx writes it (ReduceL2 -> Clip -> Expand -> Div) */
    if (!kiln_pass_is(n, "Div") || n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0) return false;
    int den = n->in[1], reader = p;
    const kiln_node *e = producer_is(x, den, "Expand", reader);
    if (e) {
        reader = x->prod[den];
        den = e->in[0];
    }
    /* op-pattern: the norm's lower bound, Clip(norm, eps) or Max(norm, eps) */
    const kiln_node *cl = producer_is(x, den, "Clip", reader), *mx = cl ? NULL : producer_is(x, den, "Max", reader);
    int ev = -1, nv = -1;
    if (cl) { /* opset 11+: min as input 1, no max */
        if (cl->opset < 11 || cl->n_in < 2 || kiln_pass_opt_in(cl, 2) >= 0) return false;
        nv = cl->in[0];
        ev = cl->in[1];
    } else if (mx && mx->n_in == 2) {
        for (int s = 0; s < 2 && nv < 0; s++)
            if (mx->in[s] >= 0 && x->prod[mx->in[s]] >= 0 && kiln_pass_is(&x->m->nodes[x->prod[mx->in[s]]], "ReduceL2")) {
                nv = mx->in[s];
                ev = mx->in[1 - s];
            }
    } else {
        return false;
    }
    if (ev < 0 || nv < 0 || !scalar(x, ev, rank) || !plan_known(x, ev, 0)) return false;
    const kiln_node *r = producer_is(x, nv, "ReduceL2", x->prod[den]);
    if (!r || r->in[0] != n->in[0] || kiln_attr_int(r, "keepdims", 1) != 1 ||
        kiln_attr_int(r, "noop_with_empty_axes", 0) != 0)
        return false;
    int64_t axes[KILN_MAX_DIMS];
    int na = 0;
    bool absent = false;
    if (!axes_of(x, r, axes, &na, &absent) || absent || na != 1 || (axes[0] != -1 && axes[0] != rank - 1)) return false;
    /* the quotient has x's shape (no broadcast of x up) */
    for (int pp = 0; pp < 2; pp++)
        if (!same_dims(probe(x, pp, n->in[0]), probe(x, pp, n->out[0]))) return false;
    *x_out = n->in[0];
    *eps = ev;
    return true;
}

/* The view step(s) of the node producing v, into r; false when it is no view step. */
static bool view_step(ctx *x, match *mt, int v, bool allow_scale, rec *r) {
    const int p = x->prod[v];
    if (p < 0) return false;
    const kiln_node *n = &x->m->nodes[p];
    if (n->n_in < 1 || n->in[0] < 0) return false;
    r->node = p;
    r->from = n->in[0];
    r->nops = 0;
    int64_t *o = r->ops;
    /* op-pattern: the view ops whose chains become strides */
    if (kiln_pass_is(n, "Identity")) return true;
    if (kiln_pass_is(n, "Reshape")) {
        const int pi = n->n_in > 1 && n->in[1] >= 0 ? param(mt, n->in[1]) : -1;
        if (pi < 0) return false;
        o[0] = KILN_ATTN_RESHAPE;
        o[1] = pi;
        o[2] = n->opset >= 14 && kiln_attr_int(n, "allowzero", 0) != 0;
        r->nops = 3;
        return true;
    }
    if (kiln_pass_is(n, "Transpose")) {
        const int rank = probe(x, 0, n->in[0])->ndim;
        if (rank < 1) return false;
        int np = 0;
        const int64_t *perm = kiln_attr_ints(n, "perm", &np);
        if (perm && np != rank) return false;
        o[0] = KILN_ATTN_TRANSPOSE;
        o[1] = rank;
        for (int d = 0; d < rank; d++) o[2 + d] = perm ? perm[d] : rank - 1 - d;
        r->nops = 2 + rank;
        return true;
    }
    if (kiln_pass_is(n, "Gather")) {
        const kiln_tensor *idx = n->n_in > 1 ? kiln_pass_constant(x->m, x->prod, n->in[1]) : NULL;
        if (!idx || !kiln_dtype_is_int(idx->dtype) || kiln_tensor_numel(idx) != 1 || idx->ndim > 1) return false;
        const int64_t i = kiln_get_i64(idx, 0), axis = kiln_attr_int(n, "axis", 0);
        if (idx->ndim == 0) {
            o[0] = KILN_ATTN_GATHER;
            o[1] = axis;
            o[2] = i;
            r->nops = 3;
        } else {
            o[0] = KILN_ATTN_SLICE;
            o[1] = axis;
            o[2] = i;
            o[3] = i == -1 ? INT64_MAX : i + 1;
            r->nops = 4;
        }
        return true;
    }
    /* op-pattern: Squeeze / Unsqueeze as a view step */
    if (kiln_pass_is(n, "Squeeze") || kiln_pass_is(n, "Unsqueeze")) {
        const bool sq = kiln_pass_is(n, "Squeeze");
        int64_t axes[KILN_MAX_DIMS];
        int na = 0;
        bool absent = false;
        if (!axes_of(x, n, axes, &na, &absent) || (absent && !sq)) return false;
        if (absent) { /* every dim that is 1 whatever the symbolic dims */
            const kiln_tensor *a = probe(x, 0, n->in[0]), *b = probe(x, 1, n->in[0]);
            if (a->ndim < 0 || a->ndim != b->ndim) return false;
            for (int d = 0; d < a->ndim; d++)
                if (a->dims[d] == 1 && b->dims[d] == 1) axes[na++] = d;
        }
        o[0] = sq ? KILN_ATTN_SQUEEZE : KILN_ATTN_UNSQUEEZE;
        o[1] = na;
        for (int k = 0; k < na; k++) o[2 + k] = axes[k];
        r->nops = 2 + na;
        return true;
    }
    if (kiln_pass_is(n, "Slice")) {
        int64_t st[KILN_MAX_DIMS], en[KILN_MAX_DIMS], ax[KILN_MAX_DIMS], sp[KILN_MAX_DIMS];
        int ns = 0, ne = 0, na = 0, nsp = 0;
        if (n->opset < 10) {
            const int64_t *a = kiln_attr_ints(n, "starts", &ns), *b = kiln_attr_ints(n, "ends", &ne),
                          *c = kiln_attr_ints(n, "axes", &na);
            if (!a || !b || ns != ne || ns > KILN_MAX_DIMS || (c && na != ns)) return false;
            memcpy(st, a, (size_t)ns * sizeof *a);
            memcpy(en, b, (size_t)ne * sizeof *b);
            if (c) memcpy(ax, c, (size_t)na * sizeof *c);
        } else {
            if (kiln_pass_opt_in(n, 4) >= 0 && !const_ints(x, n->in[4], sp, KILN_MAX_DIMS, &nsp)) return false;
            if (kiln_pass_opt_in(n, 3) >= 0 && !const_ints(x, n->in[3], ax, KILN_MAX_DIMS, &na)) return false;
            if (!const_ints(x, kiln_pass_opt_in(n, 1), st, KILN_MAX_DIMS, &ns) ||
                !const_ints(x, kiln_pass_opt_in(n, 2), en, KILN_MAX_DIMS, &ne)) {
                /* one axis whose start and end are computed from shapes: value inputs */
                const int s1 = kiln_pass_opt_in(n, 1), e1 = kiln_pass_opt_in(n, 2);
                if (s1 < 0 || e1 < 0 || na > 1 || nsp > 1 || (nsp == 1 && sp[0] != 1) || !plan_known(x, s1, 0) ||
                    !plan_known(x, e1, 0))
                    return false;
                for (int pp = 0; pp < 2; pp++)
                    if (kiln_numel(probe(x, pp, s1)->ndim, probe(x, pp, s1)->dims) != 1 ||
                        kiln_numel(probe(x, pp, e1)->ndim, probe(x, pp, e1)->dims) != 1)
                        return false;
                const int ps = param(mt, s1), pe = param(mt, e1);
                if (ps < 0 || pe < 0) return false;
                o[0] = KILN_ATTN_SLICE_P;
                o[1] = na ? ax[0] : 0;
                o[2] = ps;
                o[3] = pe;
                r->nops = 4;
                return true;
            }
            if (ns != ne || (na && na != ns) || (nsp && nsp != ns)) return false;
        }
        if (na == 0)
            for (int k = 0; k < ns; k++) ax[k] = k;
        for (int k = 0; k < nsp; k++)
            if (sp[k] != 1) return false;
        for (int k = 0; k < ns; k++) {
            o[r->nops++] = KILN_ATTN_SLICE;
            o[r->nops++] = ax[k];
            o[r->nops++] = st[k];
            o[r->nops++] = en[k];
        }
        return true;
    }
    if (kiln_pass_is(n, "Split")) {
        int k = -1;
        for (int i = 0; i < n->n_out; i++)
            if (n->out[i] == v) k = i;
        const kiln_tensor *a = probe(x, 0, n->in[0]), *b = probe(x, 1, n->in[0]);
        int64_t axis = kiln_attr_int(n, "axis", 0);
        if (k < 0 || a->ndim < 1 || !kiln_norm_axis(&axis, a->ndim) || b->ndim != a->ndim) return false;
        int64_t sizes[64];
        int ns = 0;
        int c = 0;
        const int64_t *sa = kiln_attr_ints(n, "split", &c);
        if (sa && c <= 64) {
            memcpy(sizes, sa, (size_t)c * sizeof *sa);
            ns = c;
        } else if (kiln_pass_opt_in(n, 1) >= 0) {
            if (!const_ints(x, n->in[1], sizes, 64, &ns)) return false;
        } else { /* equal parts: the axis must not depend on the symbolic dims */
            const int64_t dim = a->dims[axis], parts = n->n_out;
            if (b->dims[axis] != dim || parts < 1) return false;
            const int64_t each = (dim + parts - 1) / parts;
            for (int i = 0; i < parts && i < 64; i++) sizes[ns++] = i < parts - 1 ? each : dim - each * (parts - 1);
        }
        if (k >= ns) return false;
        int64_t off = 0;
        for (int i = 0; i < k; i++) off += sizes[i];
        o[0] = KILN_ATTN_SLICE;
        o[1] = axis;
        o[2] = off;
        o[3] = off + sizes[k];
        r->nops = 4;
        return true;
    }
    /* q's or k's rows L2-normalized (Swin V2's cosine attention) */
    int xv = -1, ev = -1;
    if (allow_scale && l2_normalize(x, p, probe(x, 0, v)->ndim, &xv, &ev)) {
        const int pi = param(mt, ev);
        if (pi < 0) return false;
        r->from = xv;
        o[0] = KILN_ATTN_L2NORM;
        o[1] = pi;
        r->nops = 2;
        return true;
    }
    /* op-pattern: a Mul / Div by a scalar on q or k */
    if (allow_scale && (kiln_pass_is(n, "Mul") || kiln_pass_is(n, "Div")) && n->n_in == 2 && n->in[1] >= 0) {
        const bool div = kiln_pass_is(n, "Div");
        const int out_rank = probe(x, 0, v)->ndim;
        for (int s = div ? 1 : 0; s < 2; s++) {
            const int sv = n->in[s], other = n->in[1 - s];
            if (!scalar(x, sv, out_rank) || !same_dims(probe(x, 0, other), probe(x, 0, v)) ||
                !plan_known(x, sv, 0))
                continue;
            const int pi = param(mt, sv);
            if (pi < 0) return false;
            r->from = other;
            o[0] = div ? KILN_ATTN_RSCALE : KILN_ATTN_SCALE;
            o[1] = pi;
            r->nops = 2;
            return true;
        }
    }
    return false;
}

/* An Einsum that is a batched product: 1 when it is MatMul(A, B) ("...ik,...kj->...ij"),
 * 2 when MatMul(A, B^T) ("...ik,...jk->...ij": MaxViT's q k^T), 0 otherwise. */
static int einsum_product(const kiln_node *n) {
    const char *eq = kiln_attr_string(n, "equation", NULL);
    if (!kiln_pass_is(n, "Einsum") || n->n_in != 2 || !eq) return 0;
    char a[32], b[32], c[32];
    int na = 0, nb = 0, nc = 0, part = 0;
    for (const char *p = eq; *p; p++) {
        if (*p == ' ') continue;
        if (*p == ',' && part == 0) {
            part = 1;
            continue;
        }
        if (*p == '-' && p[1] == '>' && part == 1) {
            part = 2;
            p++;
            continue;
        }
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))) return 0;
        if (part == 0 && na < 31) a[na++] = *p;
        else if (part == 1 && nb < 31) b[nb++] = *p;
        else if (part == 2 && nc < 31) c[nc++] = *p;
        else return 0;
    }
    if (part != 2 || na < 2 || na != nb || na != nc) return 0;
    const int r = na;
    for (int k = 0; k < r - 2; k++)
        if (a[k] != b[k] || a[k] != c[k]) return 0;
    for (int k = 0; k < r; k++) /* distinct letters in each term */
        for (int l = k + 1; l < r; l++)
            if (a[k] == a[l] || b[k] == b[l] || c[k] == c[l]) return 0;
    const char i = a[r - 2], kk = a[r - 1];
    if (c[r - 2] != i || i == kk) return 0;
    if (b[r - 2] == kk && b[r - 1] == c[r - 1] && b[r - 1] != i && b[r - 1] != kk) return 1;
    if (b[r - 1] == kk && b[r - 2] == c[r - 1] && b[r - 2] != i && b[r - 2] != kk) return 2;
    return 0;
}

/* A product node of the pattern: MatMul, or an Einsum that is one (*transposed: B^T). */
static bool product(const kiln_node *n, bool *transposed) {
    /* op-pattern: the two products of attention */
    const int e = einsum_product(n);
    *transposed = e == 2;
    return (kiln_pass_is(n, "MatMul") && n->n_in == 2) || e > 0;
}

/* The view chain ending at v (backward). */
static void walk_chain(ctx *x, match *mt, int v, bool allow_scale, chain *c) {
    c->n = 0;
    while (c->n < MAX_REC && view_step(x, mt, v, allow_scale, &c->r[c->n])) {
        v = c->r[c->n].from;
        c->n++;
    }
}

/* The program of the first `keep` steps of c counted from the product (forward order
 * out), and the chain's source when cut there. */
static int program(const chain *c, int keep, int start, int64_t *out, int *n, int max) {
    *n = 0;
    for (int i = keep - 1; i >= 0; i--)
        for (int k = 0; k < c->r[i].nops && *n < max; k++) out[(*n)++] = c->r[i].ops[k];
    return keep > 0 ? c->r[keep - 1].from : start;
}

static bool add_dead(match *mt, int node) {
    if (mt->n_dead == 64) return false;
    mt->dead[mt->n_dead++] = node;
    return true;
}

/* The score chain from the Softmax's input back to the first MatMul. */
static bool score_chain(ctx *x, match *mt, int sm) {
    int cur = x->m->nodes[sm].in[0], next = sm;
    int64_t back[128];
    int nb = 0;
    bool seen_scale = false, seen_tensor = false;
    int biases[2], nbias = 0;
    for (int guard = 0; guard < 12; guard++) {
        if (cur < 0 || kiln_pass_single_consumer(x->m, cur) != next) return false;
        const int p = x->prod[cur];
        if (p < 0) return false;
        const kiln_node *n = &x->m->nodes[p];
        /* op-pattern: MatMul [-> Mul/Div scalar] [-> Add bias / Reshape] -> Softmax */
        bool kt = false;
        if (product(n, &kt)) {
            mt->m1 = p;
            mt->k_transposed = kt;
            /* forward order: reverse the backward records (each a whole step) */
            mt->s_n = 0;
            int end = nb;
            while (end > 0) {
                int len = (int)back[end - 1], beg = end - 1 - len;
                for (int k = beg; k < end - 1; k++) mt->s_ops[mt->s_n++] = back[k];
                /* bias slots in forward order */
                if (back[beg] == KILN_ATTN_BIAS) mt->s_ops[mt->s_n - 1] = nbias - 1 - back[beg + 1];
                end = beg;
            }
            for (int i = 0; i < nbias; i++) mt->bias[i] = biases[nbias - 1 - i];
            mt->n_bias = nbias;
            return add_dead(mt, p);
        }
        if (nb > 100 || !add_dead(mt, p)) return false;
        int64_t step[4];
        int ns = 0, from = -1;
        /* op-pattern: Reshape / Add bias / Mul or Div by a scalar on the scores */
        if (kiln_pass_is(n, "Reshape") && n->n_in > 1 && n->in[1] >= 0) {
            const int pi = param(mt, n->in[1]);
            if (pi < 0) return false;
            step[ns++] = KILN_ATTN_RESHAPE;
            step[ns++] = pi;
            step[ns++] = n->opset >= 14 && kiln_attr_int(n, "allowzero", 0) != 0;
            from = n->in[0];
        } else if (kiln_pass_is(n, "Add") && n->n_in == 2 && nbias < 2 && !seen_scale) {
            int pick = -1;
            for (int s = 0; s < 2 && pick < 0; s++) {
                const int a = n->in[s];
                if (a < 0 || x->prod[a] < 0 || !same_dims(probe(x, 0, a), probe(x, 0, cur)) ||
                    !same_dims(probe(x, 1, a), probe(x, 1, cur)))
                    continue;
                const kiln_node *pa = &x->m->nodes[x->prod[a]];
                bool unused = false;
                /* op-pattern: the scores' side of the Add comes from the chain's ops */
                if (product(pa, &unused) || kiln_pass_is(pa, "Reshape") || kiln_pass_is(pa, "Add") ||
                    kiln_pass_is(pa, "Mul") || kiln_pass_is(pa, "Div"))
                    pick = s;
            }
            if (pick < 0 || n->in[1 - pick] < 0) return false;
            biases[nbias] = n->in[1 - pick];
            step[ns++] = KILN_ATTN_BIAS;
            step[ns++] = nbias++; /* backward count; renumbered forward above */
            from = n->in[pick];
        } else if (/* op-pattern: a scale of the scores */ (kiln_pass_is(n, "Mul") || kiln_pass_is(n, "Div")) &&
                   n->n_in == 2) {
            const bool div = kiln_pass_is(n, "Div");
            const int rank = probe(x, 0, cur)->ndim;
            for (int s = div ? 1 : 0; s < 2 && from < 0; s++) {
                const int sv = n->in[s];
                if (sv < 0 || n->in[1 - s] < 0 || !plan_known(x, sv, 0) ||
                    !same_dims(probe(x, 0, n->in[1 - s]), probe(x, 0, cur)) ||
                    !same_dims(probe(x, 1, n->in[1 - s]), probe(x, 1, cur)))
                    continue;
                /* a scalar, or one tensor of per-batch factors (the op checks it is one) */
                if (!scalar(x, sv, rank) && (seen_tensor || !batch_factor(x, sv, cur))) continue;
                if (!scalar(x, sv, rank)) seen_tensor = true;
                const int pi = param(mt, sv);
                if (pi < 0) return false;
                step[ns++] = div ? KILN_ATTN_RSCALE : KILN_ATTN_SCALE;
                step[ns++] = pi;
                from = n->in[1 - s];
            }
            if (from < 0) return false;
            seen_scale = true;
        } else {
            return false;
        }
        for (int k = 0; k < ns; k++) back[nb++] = step[k];
        back[nb++] = ns; /* each record ends with its length */
        next = p;
        cur = from;
    }
    return false;
}

/* Set the INTS attribute name of a (scratch) attribute array. */
static void set_ints(kiln_attr *a, int *na, const char *name, int64_t *v, int n) {
    if (n <= 0) return;
    memset(&a[*na], 0, sizeof a[*na]);
    a[*na].name = (char *)name;
    a[*na].type = KILN_ATTR_INTS;
    a[*na].n = n;
    a[*na].ints = v;
    (*na)++;
}

typedef struct built {
    int in[32], n_in;
    int64_t qo[MAX_REC * MAX_REC_OPS], ko[MAX_REC * MAX_REC_OPS], vo[MAX_REC * MAX_REC_OPS],
        oo[MAX_REC * MAX_REC_OPS];
    int nq, nk, nv, no;
    kiln_attr attrs[6];
    int n_attrs;
    kiln_node node;
    int out;      /* the node's output value */
    int last;     /* the node it replaces (the last of the output chain kept) */
} built;

/* The node for the chains cut to keep[] steps (q, k, v, o: the input chains keep their
 * steps next to the products, the output chain its first). */
static void build(const ctx *x, match *mt, const int *keep, built *b) {
    const kiln_model *m = x->m;
    const kiln_node *m1 = &m->nodes[mt->m1], *m2 = &m->nodes[mt->m2];
    const int kq = keep[0], kk = keep[1], kv = keep[2], ko = keep[3];
    const int max = MAX_REC * MAX_REC_OPS;
    b->in[0] = program(&mt->q, kq, m1->in[0], b->qo, &b->nq, max);
    b->in[1] = program(&mt->k, kk, m1->in[1], b->ko, &b->nk, max);
    if (mt->k_transposed) { /* K^T of an Einsum's K */
        const int r = x->vt[0][m1->in[1]].ndim;
        if (r >= 2 && b->nk + 2 + r <= max) {
            b->ko[b->nk++] = KILN_ATTN_TRANSPOSE;
            b->ko[b->nk++] = r;
            for (int d = 0; d < r; d++) b->ko[b->nk++] = d < r - 2 ? d : 2 * r - 3 - d;
        }
    }
    b->in[2] = program(&mt->v, kv, m2->in[1], b->vo, &b->nv, max);
    b->no = 0;
    for (int i = 0; i < ko; i++)
        for (int k = 0; k < mt->o.r[i].nops; k++) b->oo[b->no++] = mt->o.r[i].ops[k];
    b->last = ko > 0 ? mt->o.r[ko - 1].node : mt->m2;
    b->out = m->nodes[b->last].out[0];
    b->in[3] = mt->n_bias > 0 ? mt->bias[0] : -1;
    b->in[4] = mt->n_bias > 1 ? mt->bias[1] : -1;
    for (int i = 0; i < mt->n_params; i++) b->in[KILN_ATTN_FIRST_PARAM + i] = mt->params[i];
    b->n_in = mt->n_params ? KILN_ATTN_FIRST_PARAM + mt->n_params : mt->n_bias ? 3 + mt->n_bias : 3;
    b->n_attrs = 0;
    set_ints(b->attrs, &b->n_attrs, "q_view", b->qo, b->nq);
    set_ints(b->attrs, &b->n_attrs, "k_view", b->ko, b->nk);
    set_ints(b->attrs, &b->n_attrs, "v_view", b->vo, b->nv);
    set_ints(b->attrs, &b->n_attrs, "s_view", mt->s_ops, mt->s_n);
    set_ints(b->attrs, &b->n_attrs, "o_view", b->oo, b->no);
    memset(&b->node, 0, sizeof b->node);
    b->node.op_type = (char *)"Attention";
    b->node.domain = (char *)"kiln";
    b->node.name = m->nodes[b->last].name;
    b->node.op = kiln_op_index_domain("kiln", "Attention");
    b->node.opset = 1;
    b->node.n_in = b->n_in;
    b->node.in = b->in;
    b->node.n_out = 1;
    b->node.out = &b->out;
    b->node.n_attrs = b->n_attrs;
    b->node.attrs = b->attrs;
    b->node.model = (kiln_model *)m;
}

/* The node resolves in both probes and the backend takes it. */
static bool valid(const ctx *x, const kiln_pass_options *o, built *b) {
    const kiln_backend_i *be = kiln_backend_for(o->device);
    for (int p = 0; p < 2; p++) {
        kiln_tensor *t[32] = {NULL};
        for (int i = 0; i < b->n_in; i++) {
            if (b->in[i] < 0) continue;
            t[i] = &x->vt[p][b->in[i]];
            if (t[i]->ndim < 0 || !kiln_dtype_valid(t[i]->dtype) || (i >= KILN_ATTN_FIRST_PARAM && !t[i]->data)) {
                kiln_log(x->m->ctx, KILN_LOG_DEBUG, "fuse-attention: '%s': input %d ('%s') has no shape or value in "
                         "probe %d", b->node.name, i, x->m->values[b->in[i]].name, p);
                return false;
            }
        }
        kiln_context quiet = {0};
        kiln_tensor out = {0};
        kiln_tensor *outp = &out;
        kiln_op_ctx c = {.kctx = &quiet, .node = &b->node, .n_in = b->n_in, .in = t, .n_out = 1, .out = &outp};
        kiln_attn_geom g;
        if (kiln_attention_resolve(&c, t, &g)) {
            kiln_log(x->m->ctx, KILN_LOG_DEBUG, "fuse-attention: not as views: %s", kiln_context_message(&quiet));
            return false;
        }
        /* the output is the value the chain gave */
        const kiln_tensor *want = &x->vt[p][b->out];
        bool same = want->ndim == g.out_ndim;
        for (int d = 0; same && d < g.out_ndim; d++) same = want->dims[d] == g.out_dims[d];
        if (!same) {
            kiln_log(x->m->ctx, KILN_LOG_DEBUG, "fuse-attention: '%s': the output's shape differs in probe %d",
                     b->node.name, p);
            return false;
        }
        kiln_tensor_set_shape(&out, t[0]->dtype, g.out_ndim, g.out_dims);
        if (be && be->supports && be->supports(&c) != KILN_OK) {
            kiln_log(x->m->ctx, KILN_LOG_DEBUG, "fuse-attention: '%s': the backend refuses it: %s", b->node.name,
                     kiln_context_message(&quiet));
            return false;
        }
    }
    return true;
}

static bool softmax_last_axis(const ctx *x, const kiln_node *n) {
    const int rank = probe(x, 0, n->in[0])->ndim;
    int64_t axis = kiln_attr_int(n, "axis", n->opset >= 13 ? -1 : 1);
    return rank >= 2 && kiln_norm_axis(&axis, rank) && axis == rank - 1;
}

/* Try to fuse the attention around Softmax node sm; on success rewrite and mark dead. */
static kiln_status try_fuse(ctx *x, const kiln_pass_options *o, int sm, bool *dead, bool *changed) {
    kiln_model *m = x->m;
    const kiln_node *s = &m->nodes[sm];
    if (s->n_in < 1 || s->in[0] < 0 || s->n_out < 1 || s->out[0] < 0 || !softmax_last_axis(x, s)) return KILN_OK;
    match *mt = calloc(1, sizeof *mt);
    built *b = calloc(1, sizeof *b);
    if (!mt || !b) {
        free(mt);
        free(b);
        return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    kiln_status st = KILN_OK;
    bool ok = score_chain(x, mt, sm) && add_dead(mt, sm);
    /* forward from the Softmax: batch-only Reshapes, then the second MatMul */
    int cur = s->out[0];
    for (int guard = 0; ok && guard < 4; guard++) {
        const int c = kiln_pass_single_consumer(m, cur);
        if (c < 0) {
            ok = false;
            break;
        }
        const kiln_node *n = &m->nodes[c];
        /* op-pattern: Softmax [-> Reshape] -> MatMul */
        bool vt = false;
        if (product(n, &vt) && !vt && n->in[0] == cur && n->in[1] != cur && n->in[1] >= 0) {
            mt->m2 = c;
            ok = add_dead(mt, c);
            break;
        }
        if (!kiln_pass_is(n, "Reshape") || n->in[0] != cur || n->n_in < 2 || n->in[1] < 0 || mt->s_n > 120) {
            ok = false;
            break;
        }
        const int pi = param(mt, n->in[1]);
        if (pi < 0) ok = false;
        mt->s_ops[mt->s_n++] = KILN_ATTN_RESHAPE;
        mt->s_ops[mt->s_n++] = pi;
        mt->s_ops[mt->s_n++] = n->opset >= 14 && kiln_attr_int(n, "allowzero", 0) != 0;
        ok = ok && add_dead(mt, c);
        cur = n->out[0];
        if (guard == 3) ok = false;
    }
    for (int i = 0; ok && i < mt->n_dead; i++) ok = !dead[mt->dead[i]];
    if (ok) {
        const kiln_node *m1 = &m->nodes[mt->m1], *m2 = &m->nodes[mt->m2];
        ok = m1->n_in == 2 && m1->in[0] >= 0 && m1->in[1] >= 0 && m2->n_in == 2;
        if (ok) {
            walk_chain(x, mt, m1->in[0], true, &mt->q);
            walk_chain(x, mt, m1->in[1], true, &mt->k);
            walk_chain(x, mt, m2->in[1], false, &mt->v);
            /* the output chain, forward */
            int v = m2->out[0];
            mt->o.n = 0;
            while (mt->o.n < MAX_REC) {
                const int c = kiln_pass_single_consumer(m, v);
                if (c < 0 || dead[c]) break;
                const kiln_node *n = &m->nodes[c];
                /* op-pattern: the head merge after the product */
                if (n->n_out != 1 || n->out[0] < 0 || n->in[0] != v ||
                    !(kiln_pass_is(n, "Transpose") || kiln_pass_is(n, "Reshape") || kiln_pass_is(n, "Squeeze") ||
                      kiln_pass_is(n, "Unsqueeze") || kiln_pass_is(n, "Identity")))
                    break;
                rec r;
                if (!view_step(x, mt, n->out[0], false, &r)) break;
                mt->o.r[mt->o.n++] = r;
                v = n->out[0];
            }
        }
    }
    if (ok) {
        /* the whole chains; else each chain cut on its own as little as it needs (the other
         * chains empty: their operands as they are), its steps nearest its source first */
        const int full[4] = {mt->q.n, mt->k.n, mt->v.n, mt->o.n};
        int keep[4] = {full[0], full[1], full[2], full[3]};
        build(x, mt, keep, b);
        ok = valid(x, o, b);
        if (!ok) {
            int best[4] = {-1, -1, -1, -1};
            for (int c = 0; c < 4; c++)
                for (int kc = full[c]; kc >= 0 && best[c] < 0; kc--) {
                    int one[4] = {0, 0, 0, 0};
                    one[c] = kc;
                    build(x, mt, one, b);
                    if (valid(x, o, b)) best[c] = kc;
                }
            ok = best[0] >= 0 && best[1] >= 0 && best[2] >= 0 && best[3] >= 0;
            if (ok) {
                memcpy(keep, best, sizeof keep);
                build(x, mt, keep, b);
                ok = valid(x, o, b);
            }
        }
        if (ok) {
            kiln_log(m->ctx, KILN_LOG_DEBUG, "fuse-attention: '%s' (view steps kept: q %d/%d, k %d/%d, v %d/%d, out %d/%d)",
                     m->nodes[b->last].name, keep[0], full[0], keep[1], full[1], keep[2], full[2], keep[3], full[3]);
            for (int i = 0; i < mt->n_dead; i++) dead[mt->dead[i]] = true;
            for (int i = 0; i < mt->o.n && mt->o.r[i].node != b->last; i++) dead[mt->o.r[i].node] = true;
            dead[b->last] = false;
            st = kiln_pass_rewrite(m, b->last, "kiln", "Attention", b->n_in, b->in, &b->node);
            *changed = true;
        }
    }
    free(mt);
    free(b);
    return st;
}

kiln_status kiln_pass_fuse_attention(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (!kiln_pass_device_has(o, "Attention")) return KILN_OK;
    bool any = false;
    for (int i = 0; i < m->n_nodes && !any; i++) any = kiln_pass_is(&m->nodes[i], "Softmax");
    if (!any) return KILN_OK;
    ctx x = {.m = m};
    kiln_tensor **held[2] = {NULL, NULL};
    kiln_status st = kiln_pass_infer_values(m, 1, &x.vt[0], &held[0]);
    if (!st) st = kiln_pass_infer_values(m, 3, &x.vt[1], &held[1]);
    const int nn = m->n_nodes;
    x.prod = st ? NULL : kiln_pass_producers(m);
    x.known = calloc((size_t)m->n_values + 1, 1);
    bool *dead = calloc((size_t)nn + 1, sizeof *dead);
    if (!st && (!x.prod || !x.known || !dead)) st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    bool fused = false;
    for (int i = 0; i < nn && !st; i++)
        if (!dead[i] && kiln_pass_is(&m->nodes[i], "Softmax")) st = try_fuse(&x, o, i, dead, &fused);
    if (!st && fused) {
        kiln_pass_remove_nodes(m, dead);
        /* the view chains' nodes nothing reads any more */
        st = kiln_pass_dead_nodes(m, o, changed);
        if (!st) st = kiln_pass_sort_nodes(m);
        *changed = true;
    }
    for (int p = 0; p < 2; p++) {
        for (int v = 0; held[p] && v < m->n_values; v++) kiln_tensor_free(held[p][v]);
        free(held[p]);
        free(x.vt[p]);
    }
    free(x.prod);
    free(x.known);
    free(dead);
    return st;
}
