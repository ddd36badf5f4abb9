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
 * Before matching (unless KILN_PASS_ATTENTION_ROWS is disabled), Transposes that keep the
 * last axis move across the projections around an attention (nn.MultiheadAttention's
 * (B, L, E) <-> (L, B, E) swaps) next to it, where its chains take them as view steps;
 * one the fusion did not take moves back (see "transposes moved next to the attention").
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

/* ------------------------------------------------ transposes moved next to the attention
 *
 * A Transpose that keeps the last axis moves whole rows, and a Linear (MatMul by a constant
 * matrix [then a bias row], or a Gemm of rows) works row by row: T(X) W + b = T(X W + b).
 * torch's nn.MultiheadAttention export (batch_first) transposes (B, L, E) to (L, B, E)
 * before its in-projection and back after its out-projection: two copies of the activations
 * a layer. Moved next to the attention (the in-projection's after it, the out-projection's
 * before it) they become view steps of the kiln.Attention node and never run:
 *   sink:  Transpose(X) -> MatMul(., W) [-> Add(., b)] -> S   becomes
 *          MatMul(X, W) [-> Add(., b)] -> S' -> Transpose -> S
 *          where S's readers (but Shape) are view nodes; undone after the fusion when the
 *          moved Transpose still runs (the product's rows can be wider than its input's).
 *   hoist: Gemm(Y, W, c) -> Reshape -> Transpose -> Z   (Y 2-D, c absent or a row, K <= N)
 *          becomes Reshape(Y) -> Transpose -> Reshape to rows -> Gemm -> Reshape -> Z,
 *          and MatMul(Y, W) [-> Add(., b)] -> Transpose -> Z the same without Reshapes:
 *          a copy of K-wide rows instead of N-wide ones where the attention does not take
 *          it. The Reshapes' targets are constants (the probes' dims, -1 for the one that
 *          depends on a symbolic dim). */

typedef struct sunk {
    int x, t_out; /* the Transpose's input and output */
    int y;        /* the MatMul's output */
    int s, s2;    /* the Linear's output (now the moved Transpose's) and its new output */
} sunk;

/* n is a Transpose of one input whose perm keeps the last axis (rank >= 2): perm in p[], rank in *r. */
static bool rows_perm(const kiln_node *n, int64_t *p, int *r) {
    if (!kiln_pass_is(n, "Transpose") || n->n_in != 1 || n->in[0] < 0 || n->n_out != 1 || n->out[0] < 0) return false;
    const int64_t *a = kiln_attr_ints(n, "perm", r);
    if (!a || *r < 2 || *r > KILN_MAX_DIMS || a[*r - 1] != *r - 1) return false;
    memcpy(p, a, (size_t)*r * sizeof *p);
    return true;
}

/* Input k of node n reads only its shape (Shape, Size: the op property). */
static bool shape_only(const kiln_node *n, int k) {
    const kiln_op_def *d = kiln_pass_is(n, n->op_type) ? kiln_node_def(n) : NULL; /* ONNX ops */
    return d && kiln_input_in_mask(d->shape_only_inputs, k);
}

/* Readers of v: *others counts the node inputs that are not Shape / Size nodes' (graph
 * outputs count), *only the one such reader (-1 when none or several). */
static void readers(const kiln_model *m, int v, int *others, int *only) {
    *others = 0;
    *only = -1;
    for (int i = 0; i < m->n_outputs; i++) *others += m->outputs[i] == v;
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == v && !shape_only(n, k)) {
                ++*others;
                *only = i;
            }
    }
    if (*others != 1) *only = -1;
}

/* A view node (what fuse-attention's chains walk through). */
static bool view_node(const kiln_node *n) {
    /* op-pattern: the view steps fuse-attention's chains walk (view_step) */
    static const char *const ops[] = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Gather", "Slice", "Split",
                                      "Identity"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (kiln_pass_is(n, ops[i])) return true; /* op-pattern */
    return false;
}

/* v comes through views (its only readers on the way) from an attention's second product:
 * MatMul(Softmax(...) [-> Reshape], V). A Transpose hoisted onto v then joins the fused
 * node's output view; anywhere else it would run where it did not (a projection's output
 * transposed into an attention's operand is a view step already). */
static bool after_attention(const kiln_model *m, const int *prod, int v) {
    for (int guard = 0; guard < 8 && v >= 0 && prod[v] >= 0; guard++) {
        const kiln_node *n = &m->nodes[prod[v]];
        if (kiln_pass_is(n, "MatMul")) {
            for (int k = 0; k < n->n_in && k < 2; k++) {
                int a = n->in[k];
                for (int s = 0; s < 2 && a >= 0 && prod[a] >= 0; s++) {
                    const kiln_node *q = &m->nodes[prod[a]];
                    /* op-pattern: Softmax [-> Reshape] -> MatMul */
                    if (kiln_pass_is(q, "Softmax")) return true;
                    if (!kiln_pass_is(q, "Reshape")) break;
                    a = q->in[0];
                }
            }
            return false;
        }
        /* op-pattern: the head merge after the product (as try_fuse's output chain) */
        if (!(kiln_pass_is(n, "Reshape") || kiln_pass_is(n, "Transpose") || kiln_pass_is(n, "Squeeze") ||
              kiln_pass_is(n, "Unsqueeze") || kiln_pass_is(n, "Identity")) ||
            n->in[0] < 0 || kiln_pass_uses(m, v) != 1)
            return false;
        v = n->in[0];
    }
    return false;
}

/* An attribute-only node appended (perm or axis text); its index or -1. */
static int add_node(kiln_model *m, const char *op, const char *name, int n_in, const int *in, int out, const char *attrs) {
    kiln_attr *a = NULL;
    int na = 0;
    if (attrs && kiln_attrs_parse(m->ctx, attrs, &a, &na) != KILN_OK) return -1;
    char unique[300]; /* exporters may leave node names empty: the moved nodes' hints repeat */
    snprintf(unique, sizeof unique, "%.200s#%d", name, m->n_nodes);
    return kiln_model_add_node_raw(m, op, unique, "", n_in, in, 1, &out, na, a);
}

static int perm_text(char *buf, size_t cap, const int64_t *p, int r) {
    int k = snprintf(buf, cap, "perm=[");
    for (int d = 0; d < r && k > 0 && (size_t)k < cap; d++) k += snprintf(buf + k, cap - (size_t)k, "%s%lld", d ? "," : "", (long long)p[d]);
    if (k > 0 && (size_t)k < cap) k += snprintf(buf + k, cap - (size_t)k, "]");
    return k > 0 && (size_t)k < cap;
}

/* v's dims from the probes, -1 where they differ (at most one such); false when unknown. */
static bool probe_dims(const kiln_shape_probes *pr, int v, int64_t *d, int *r) {
    if (v < 0 || v >= pr->n) return false;
    const kiln_tensor *a = &pr->one[v], *b = &pr->three[v];
    if (a->ndim < 1 || a->ndim != b->ndim) return false;
    int unknown = 0;
    for (int i = 0; i < a->ndim; i++) {
        d[i] = a->dims[i] == b->dims[i] ? a->dims[i] : -1;
        unknown += d[i] < 0;
    }
    *r = a->ndim;
    return unknown <= 1;
}

/* The Linear after node i's output: MatMul(in, W constant 2-D) [-> Add(., bias row)]; its
 * last node in *last, K and N. */
static bool linear_from(const kiln_model *m, const int *prod, int mm, int *last, int64_t *K, int64_t *N) {
    const kiln_node *n = &m->nodes[mm];
    if (!kiln_pass_is(n, "MatMul") || n->n_in != 2 || n->n_out != 1 || n->out[0] < 0) return false;
    const kiln_tensor *w = kiln_pass_constant_through(m, prod, n->in[1]);
    if (!w || w->ndim != 2) return false;
    *K = w->dims[0];
    *N = w->dims[1];
    *last = mm;
    const int a = kiln_pass_single_consumer(m, n->out[0]);
    if (a >= 0 && kiln_pass_is(&m->nodes[a], "Add") && m->nodes[a].n_in == 2 && m->nodes[a].n_out == 1) {
        const kiln_node *ad = &m->nodes[a];
        const int bv = ad->in[0] == n->out[0] ? ad->in[1] : ad->in[0];
        const kiln_tensor *b = bv != n->out[0] ? kiln_pass_constant_through(m, prod, bv) : NULL;
        if (b && b->ndim == 1 && b->dims[0] == *N) *last = a;
    }
    return true;
}

static kiln_status rows_first(kiln_model *m, sunk **recs, int *nrec, bool *changed) {
    *recs = NULL;
    *nrec = 0;
    bool any = false;
    for (int i = 0; i < m->n_nodes && !any; i++) {
        int64_t p[KILN_MAX_DIMS];
        int r;
        any = rows_perm(&m->nodes[i], p, &r);
    }
    if (!any) return KILN_OK;
    kiln_shape_probes pr;
    kiln_status st;
    if (!kiln_pass_shape_probes_or_skip(m, &pr, &st)) return st;
    int *prod = kiln_pass_producers(m);
    const int n0 = m->n_nodes;
    bool *gone = calloc((size_t)n0 + 1, sizeof *gone);
    sunk *sk = calloc((size_t)n0 + 1, sizeof *sk);
    if (!prod || !gone || !sk) st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    int nr = 0, moved = 0, done = 0;
    char name[256], pt[128];
    for (int i = 0; i < n0 && !st; i++) {
        int64_t p[KILN_MAX_DIMS];
        int r;
        if (gone[i] || !rows_perm(&m->nodes[i], p, &r) || !perm_text(pt, sizeof pt, p, r)) continue;
        if (moved > done) { /* the producers again after a rewrite (new values, moved outputs) */
            free(prod);
            if (!(prod = kiln_pass_producers(m))) {
                st = KILN_ERR_OUT_OF_MEMORY;
                break;
            }
            done = moved;
        }
        const int tin = m->nodes[i].in[0], tout = m->nodes[i].out[0];
        int others, only;
        readers(m, tout, &others, &only);
        /* sink: the Transpose's one runtime reader is a Linear whose output only views read */
        int last;
        int64_t K, N;
        if (only >= 0 && m->nodes[only].in[0] == tout && m->nodes[only].in[1] != tout &&
            linear_from(m, prod, only, &last, &K, &N)) {
            const int s = m->nodes[last].out[0];
            bool views = true;
            int nv = 0;
            for (int j = 0; j < m->n_nodes && views; j++) {
                const kiln_node *n = &m->nodes[j];
                for (int k = 0; k < n->n_in && views; k++)
                    if (n->in[k] == s && !shape_only(n, k)) views = view_node(n) && ++nv;
            }
            for (int k = 0; k < m->n_outputs; k++) views = views && m->outputs[k] != s;
            if (views && nv > 0) {
                snprintf(name, sizeof name, "%.150s_rows", m->values[s].name);
                const int s2 = kiln_pass_new_value(m, name);
                if (s2 < 0) {
                    st = KILN_ERR_OUT_OF_MEMORY;
                    break;
                }
                snprintf(name, sizeof name, "%.150s_moved", m->nodes[i].name);
                const int t2 = add_node(m, "Transpose", name, 1, &s2, s, pt);
                if (t2 < 0) {
                    st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
                    break;
                }
                m->nodes[t2].opset = m->nodes[i].opset;
                m->nodes[only].in[0] = tin;
                m->nodes[last].out[0] = s2;
                const int y = m->nodes[only].out[0];
                m->values[s2].dtype = m->values[s].dtype;
                m->values[y].ndim = m->values[s2].ndim = -1; /* inference finds them again */
                sk[nr++] = (sunk){.x = tin, .t_out = tout, .y = y, .s = s, .s2 = s2};
                moved++;
            }
            continue;
        }
        /* hoist: the Transpose reads a Linear's output (alone) */
        const int pv = prod[tin];
        if (pv < 0 || pv >= n0 || gone[pv] || kiln_pass_uses(m, tin) != 1) continue;
        const kiln_node *pn = &m->nodes[pv];
        int64_t dz[KILN_MAX_DIMS];
        int rz;
        if (kiln_pass_is(pn, "Reshape") && pn->n_in >= 2 && pn->in[0] >= 0 && prod[pn->in[0]] >= 0 &&
            probe_dims(&pr, tin, dz, &rz) && rz == r) {
            /* Gemm(Y, W, c) -> Reshape -> Transpose */
            const int gv = pn->in[0], g = prod[gv];
            const kiln_node *gn = &m->nodes[g];
            int go, gonly;
            readers(m, gv, &go, &gonly);
            if (gonly != pv || !kiln_pass_is(gn, "Gemm") || gn->n_in < 2 || gn->in[0] < 0 || gn->n_out != 1 ||
                kiln_attr_int(gn, "transA", 0) != 0)
                continue;
            const kiln_tensor *w = kiln_pass_constant_through(m, prod, gn->in[1]);
            const int cv = kiln_pass_opt_in(gn, 2);
            const kiln_tensor *c = cv >= 0 ? kiln_pass_constant_through(m, prod, cv) : NULL;
            int64_t dy[KILN_MAX_DIMS];
            int ry;
            if (!w || w->ndim != 2 || !probe_dims(&pr, gn->in[0], dy, &ry) || ry != 2 || !after_attention(m, prod, gn->in[0]))
                continue;
            const bool tb = kiln_attr_int(gn, "transB", 0) != 0;
            K = tb ? w->dims[1] : w->dims[0];
            N = tb ? w->dims[0] : w->dims[1];
            if (dy[1] != K || K > N || dz[r - 1] != N) continue;
            if (cv >= 0 && !(c && ((c->ndim == 1 && (c->dims[0] == N || c->dims[0] == 1)) ||
                                   (c->ndim == 2 && c->dims[0] == 1)))) continue;
            /* Reshape(Y) to Z's dims with K last, Transpose, Reshape to (rows, K); the
             * old Reshape then writes Z (the perm's dims) and the Transpose goes */
            int64_t da[KILN_MAX_DIMS], dzp[KILN_MAX_DIMS], db[2] = {-1, K};
            for (int d = 0; d < r; d++) {
                da[d] = d == r - 1 ? K : dz[d];
                dzp[d] = dz[p[d]];
            }
            snprintf(name, sizeof name, "%.150s_rows", m->nodes[g].name);
            const int sa = kiln_pass_add_i64s(m, name, r, da), sb = sa >= 0 ? kiln_pass_add_i64s(m, name, 2, db) : -1;
            const int sz = sb >= 0 ? kiln_pass_add_i64s(m, name, r, dzp) : -1;
            const int a1 = sz >= 0 ? kiln_pass_new_value(m, name) : -1, a2 = a1 >= 0 ? kiln_pass_new_value(m, name) : -1;
            const int a3 = a2 >= 0 ? kiln_pass_new_value(m, name) : -1;
            if (a3 < 0) {
                st = KILN_ERR_OUT_OF_MEMORY;
                break;
            }
            const int y = m->nodes[g].in[0];
            const int na = add_node(m, "Reshape", name, 2, (int[]){y, sa}, a1, NULL);
            const int nt = na >= 0 ? add_node(m, "Transpose", name, 1, &a1, a2, pt) : -1;
            const int nb = nt >= 0 ? add_node(m, "Reshape", name, 2, (int[]){a2, sb}, a3, NULL) : -1;
            if (nb < 0) {
                st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
                break;
            }
            m->nodes[na].opset = m->nodes[nb].opset = m->nodes[pv].opset > 13 ? m->nodes[pv].opset : 13;
            m->nodes[nt].opset = m->nodes[i].opset;
            m->nodes[g].in[0] = a3;
            if ((st = kiln_pass_set_input(m, pv, 1, sz)) != KILN_OK) break;
            if (m->nodes[pv].opset < 13) m->nodes[pv].opset = 13;
            m->nodes[pv].out[0] = tout;
            gone[i] = true;
            m->nodes[i].in[0] = m->nodes[i].out[0] = -1; /* removed at the end */
            moved++;
        } else if (pv >= 0) {
            /* MatMul(Y, W) [-> Add(., b)] -> Transpose: the Transpose moves onto Y */
            int mm = pv;
            if (kiln_pass_is(pn, "Add") && pn->n_in == 2) {
                for (int k = 0; k < 2 && mm == pv; k++)
                    if (pn->in[k] >= 0 && prod[pn->in[k]] >= 0 && kiln_pass_is(&m->nodes[prod[pn->in[k]]], "MatMul"))
                        mm = prod[pn->in[k]];
            }
            if (!linear_from(m, prod, mm, &last, &K, &N) || last != pv || K > N) continue;
            const int y = m->nodes[mm].in[0];
            int64_t dy[KILN_MAX_DIMS];
            int ry;
            if (!probe_dims(&pr, y, dy, &ry) || ry != r || kiln_pass_uses(m, m->nodes[mm].out[0]) != 1 ||
                !after_attention(m, prod, y))
                continue;
            snprintf(name, sizeof name, "%.150s_rows", m->values[y].name);
            const int a1 = kiln_pass_new_value(m, name);
            if (a1 < 0) {
                st = KILN_ERR_OUT_OF_MEMORY;
                break;
            }
            const int nt = add_node(m, "Transpose", name, 1, &y, a1, pt);
            if (nt < 0) {
                st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
                break;
            }
            m->nodes[nt].opset = m->nodes[i].opset;
            m->nodes[mm].in[0] = a1;
            m->values[m->nodes[mm].out[0]].ndim = -1;
            m->nodes[pv].out[0] = tout;
            gone[i] = true;
            m->nodes[i].in[0] = m->nodes[i].out[0] = -1; /* removed at the end */
            moved++;
        }
    }
    if (!st && moved) {
        st = kiln_pass_remove_sorted(m, gone, n0);
        *changed = true;
    }
    kiln_pass_shape_probes_free(&pr);
    free(prod);
    free(gone);
    if (st || !nr) free(sk);
    else {
        *recs = sk;
        *nrec = nr;
    }
    return st;
}

/* Whether value v is read at run time: by a node (but Shape / Size) whose outputs are, or
 * as a graph output. Nodes in topological order. */
static bool runtime_read(const kiln_model *m, int v, bool *read) {
    memset(read, 0, (size_t)m->n_values + 1);
    for (int i = 0; i < m->n_outputs; i++) read[m->outputs[i]] = true;
    for (int i = m->n_nodes - 1; i >= 0; i--) {
        const kiln_node *n = &m->nodes[i];
        bool live = n->n_out == 0;
        for (int k = 0; k < n->n_out && !live; k++) live = n->out[k] >= 0 && read[n->out[k]];
        for (int k = 0; live && k < n->n_in; k++)
            if (n->in[k] >= 0 && !shape_only(n, k)) read[n->in[k]] = true;
    }
    return read[v];
}

/* The sunk Transposes the fusion did not take (still run): back before their Linears. */
static kiln_status unsink(kiln_model *m, const kiln_pass_options *o, const sunk *sk, int nrec) {
    int *prod = kiln_pass_producers(m);
    /* one value more each undone move */
    bool *read = calloc((size_t)(m->n_values + nrec) + 1, sizeof *read);
    kiln_status st = prod && read ? KILN_OK : kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    bool any = false;
    for (int i = 0; i < nrec && !st; i++) {
        const sunk *r = &sk[i];
        const int t = prod[r->s], mm = prod[r->y], last = prod[r->s2];
        if (t < 0 || mm < 0 || last < 0 || m->nodes[t].in[0] != r->s2 || m->nodes[mm].in[0] != r->x) continue;
        if (!runtime_read(m, r->s, read)) continue;
        /* a fused node that took the moved Transpose in one chain reads S' itself: S' must
         * stay the product's output, and the Transpose runs (no worse than a cut chain) */
        int s2_readers = 0;
        for (int j = 0; j < m->n_nodes; j++)
            for (int k = 0; k < m->nodes[j].n_in; k++) s2_readers += m->nodes[j].in[k] == r->s2;
        for (int k = 0; k < m->n_outputs; k++) s2_readers += m->outputs[k] == r->s2;
        if (s2_readers != 1) continue;
        /* the moved Transpose reads X again and feeds the MatMul; the Linear writes S */
        const int tin = kiln_pass_new_value(m, m->values[r->t_out].name);
        if (tin < 0) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        m->values[tin].dtype = m->values[r->x].dtype;
        m->nodes[t].in[0] = r->x;
        m->nodes[t].out[0] = tin;
        m->nodes[mm].in[0] = tin;
        m->nodes[last].out[0] = r->s;
        m->values[r->y].ndim = -1;
        any = true;
    }
    if (!st && any) { /* the first Transposes, which only Shape nodes may read now, go */
        bool ch = false;
        st = kiln_pass_sort_nodes(m);
        if (!st) st = kiln_pass_dead_nodes(m, o, &ch);
    }
    free(prod);
    free(read);
    return st;
}

kiln_status kiln_pass_fuse_attention(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (!kiln_pass_device_has(o, "Attention")) return KILN_OK;
    bool any = false;
    for (int i = 0; i < m->n_nodes && !any; i++) any = kiln_pass_is(&m->nodes[i], "Softmax");
    if (!any) return KILN_OK;
    /* the transposes around the projections moved next to the attention (attention-rows) */
    sunk *sk = NULL;
    int nrec = 0;
    kiln_status st = o->disabled & KILN_PASS_ATTENTION_ROWS ? KILN_OK : rows_first(m, &sk, &nrec, changed);
    if (st) return st;
    ctx x = {.m = m};
    kiln_tensor **held[2] = {NULL, NULL};
    st = kiln_pass_infer_values(m, 1, &x.vt[0], &held[0]);
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
    if (!st && nrec) st = unsink(m, o, sk, nrec);
    free(sk);
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
