/*
 * row_gather.c — a chain of whole-row moves as one kiln.RowGather (src/ops/row_gather.c):
 * one read and one write of the tensor where the chain made up to five copies, or none.
 *
 * Swin's window attention (v1 and v2, torchvision's) partitions each block's input as
 * Pad (the end of H and W to a multiple of the window) -> kiln.Roll (the shifted blocks;
 * src/passes/roll.c) -> Reshape (B, H/w, w, W/w, w, C) -> Transpose (0, 1, 3, 2, 4, 5) ->
 * Reshape (B nW, w w, C), and reverses it after the attention as Reshape -> Transpose ->
 * Reshape -> kiln.Roll -> Slice (H) -> Slice (W). Pads, rolls, crops and the window
 * permutation each copy the whole activation (swin_v2_s at batch 256: 5.2 of 24.6 ms on an
 * H200); none of them touches C, the innermost dim, so every output row is one input row or
 * zeros, and one gather of rows does the chain. MaxViT's window partition reads a
 * convolution's NHWC output through the layout pass's kiln.ToNCHW, then Reshape (B, C, H/p,
 * p, W/p, p) and Transpose (0, 2, 4, 3, 5, 1): in the NHWC bytes C never moves either.
 *
 * A chain: middle nodes (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Transpose; a
 * kiln.ToNCHW only first, a kiln.ToNHWC only last), with a kiln.Roll and a Pad before it and
 * a kiln.Roll and Slices from 0 after it (each optional, in that order); each value inside
 * read by the next node only, Shapes aside. The middle composes (compose, in each of two
 * shape probes) into X' — X, or an NHWC X's bytes — viewed as atoms (sub-dims every stage
 * keeps whole; a Reshape whose boundary falls inside one splits it, if the sizes divide),
 * permuted, and viewed as the result; where a stage does not compose, the chain ends before
 * it. Taken where the innermost atom of X' ends the result alone (whole rows), the probes
 * agree but for one dim of each view (the batch, as -1), every value has one dtype and its
 * 4-D values the layout the chain says (after the layout pass), and the chain makes at least
 * two copies (a zero Pad, a Slice of a whole axis, a Transpose of size-1 axes and a
 * conversion of a 4-D value with the same bytes in both layouts copy nothing; Reshapes never
 * do), or one where the composite moves no row (the gather is then a view: alias_when).
 * Pads: mode constant, value 0 or absent, no axes input, none at the start of an axis nor on
 * the last axis, the same in both probes (exporters compute them from Shape at run time);
 * rolls and crops leave the last axis alone, and a crop cuts only an axis whose size does
 * not depend on the batch. Exporters read x.shape of values inside a chain for the next
 * Reshape: those Shapes are rewritten to compute it without them (shapes_rewire), or the
 * chain ends there. The last node becomes the kiln.RowGather with the chain's output; the
 * others go. Runs where the device has the op (CPU and CUDA).
 */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct rg_ctx {
    kiln_model *m;
    kiln_value_probes pv; /* two probes' values (kiln_pass_value_probes): pv.n values */
    int nn;               /* nodes there were (those appended since are the pass's own) */
    int *prod;            /* the producer of each of the pv.n values (kiln_pass_producers) */
    int *other, *reader;  /* per value: node inputs reading it other than plain Shapes; the last */
} rg_ctx;

/* A Shape node that reads a whole tensor's dims (no start / end). */
static bool plain_shape(const kiln_node *n) {
    return kiln_pass_is(n, "Shape") && n->n_in == 1 && !kiln_node_attr(n, "start") && !kiln_node_attr(n, "end");
}

/* The rank of v and its dims: those both probes agree on, -1 where they differ; -1 when
 * the rank is not known. */
static int dims_of(const rg_ctx *p, int v, int64_t *dims) {
    if (v < 0 || v >= p->pv.n) return -1;
    const kiln_tensor *a = &p->pv.a[v], *b = &p->pv.b[v];
    if (a->ndim < 1 || a->ndim != b->ndim || a->ndim > KILN_MAX_DIMS) return -1;
    for (int d = 0; d < a->ndim; d++) dims[d] = a->dims[d] == b->dims[d] ? a->dims[d] : -1;
    return a->ndim;
}

/* Whether v can be a value inside a chain: no graph output, read by one node but for plain
 * Shapes (exporters read x.shape for the next Reshape; those are made to compute it without
 * v, shapes_rewire). */
static bool inner(const rg_ctx *p, int v) {
    return v >= 0 && v < p->pv.n && p->other[v] == 1 && !p->m->values[v].is_output;
}

/* The node reading inner value v (Shapes aside), or -1. */
static int reader_of(const rg_ctx *p, int v) { return inner(p, v) ? p->reader[v] : -1; }

/* The plain Shape nodes reading v made to compute its dims without it (v is about to go):
 * a constant where no dim depends on the batch; else Concat(the dims before, Gather(Shape(x),
 * [i]) [* or / k], the dims after), where v's batch-dependent dim is x's dim i times or
 * divided by k in both probes (the batch, which the chain carries from x to v, times the
 * windows it made, or out of the rows a product wrote). With apply false, only whether it
 * can. */
static kiln_status shapes_rewire(rg_ctx *p, int v, int x, bool apply, bool *ok) {
    kiln_model *m = p->m;
    *ok = true;
    int64_t vd[KILN_MAX_DIMS], xd[KILN_MAX_DIMS];
    const int rv = dims_of(p, v, vd), rx = dims_of(p, x, xd);
    int j = -1, i = -1;
    for (int d = 0; d < rv; d++)
        if (vd[d] < 0) j = j < 0 ? d : KILN_MAX_DIMS; /* two: not one batch */
    /* v's dim j = x's dim i times mul, or divided by div, in both probes (B nW from B, B from
     * the B L rows a product wrote) */
    int64_t mul = 1, div = 1;
    for (int d = 0; j >= 0 && j < rv && d < rx && i < 0; d++) {
        const int64_t a = p->pv.a[x].dims[d], b = p->pv.b[x].dims[d], va = p->pv.a[v].dims[j], vb = p->pv.b[v].dims[j];
        if (xd[d] >= 0 || a < 1 || b < 1 || va < 1 || vb < 1) continue;
        if (va % a == 0 && va / a * b == vb) {
            i = d;
            mul = va / a;
        } else if (a % va == 0 && b % (a / va) == 0 && b / (a / va) == vb) {
            i = d;
            div = a / va;
        }
    }
    for (int k = 0; k < p->nn; k++) {
        const kiln_node *s = &m->nodes[k];
        if (!plain_shape(s) || s->in[0] != v || s->n_out != 1 || s->out[0] < 0) continue;
        if (rv < 1 || (j >= 0 && i < 0)) {
            *ok = false;
            return KILN_OK;
        }
        if (!apply) continue;
        kiln_status st = KILN_OK;
        const char *name = s->name;
        if (j < 0) { /* a constant */
            const int c = kiln_pass_add_i64s(m, name, rv, vd);
            st = c < 0 ? KILN_ERR_OUT_OF_MEMORY : kiln_pass_rewrite(m, k, "", "Identity", 1, &c, NULL);
        } else {
            const int64_t at = i;
            const int sh = kiln_pass_new_value(m, name), g = kiln_pass_new_value(m, name);
            const int64_t f = mul > 1 ? mul : div;
            const int b = f == 1 ? g : kiln_pass_new_value(m, name);
            const int idx = kiln_pass_add_i64s(m, name, 1, &at), km = f == 1 ? 0 : kiln_pass_add_i64s(m, name, 1, &f);
            int in[3], n = 0;
            if (j > 0) in[n++] = kiln_pass_add_i64s(m, name, j, vd);
            in[n++] = b;
            if (j < rv - 1) in[n++] = kiln_pass_add_i64s(m, name, rv - 1 - j, vd + j + 1);
            bool made = sh >= 0 && g >= 0 && b >= 0 && idx >= 0 && km >= 0;
            for (int q = 0; q < n; q++) made &= in[q] >= 0;
            if (made) m->values[sh].dtype = m->values[g].dtype = m->values[b].dtype = KILN_I64;
            /* op-pattern: Shape(x) -> Gather [-> Mul or Div] into the Concat of v's dims */
            made = made && kiln_pass_append_node(m, "Shape", name, 1, &x, sh, NULL, 13) >= 0 &&
                   kiln_pass_append_node(m, "Gather", name, 2, (int[]){sh, idx}, g, "axis=0", 13) >= 0 &&
                   (f == 1 || kiln_pass_append_node(m, mul > 1 ? "Mul" : "Div", name, 2, (int[]){g, km}, b, NULL, 13) >= 0);
            st = !made ? KILN_ERR_OUT_OF_MEMORY : kiln_pass_rewrite(m, k, "", "Concat", n, in, NULL);
            if (!st) st = kiln_node_set_int(&m->nodes[k], "axis", 0);
        }
        if (st) return st == KILN_ERR_OUT_OF_MEMORY ? kiln_fail(m->ctx, st, "row-gather: out of memory") : st;
    }
    return KILN_OK;
}

/* kiln.Roll n's shift of every axis of its rank-r input (0 where not rolled); false when it
 * rolls the last axis or its attributes are malformed (the op then fails as it did). */
static bool roll_shifts(const kiln_node *n, int r, int64_t *shift) {
    int na = 0, ns = 0;
    const int64_t *axes = kiln_attr_ints(n, "axes", &na), *shifts = kiln_attr_ints(n, "shifts", &ns);
    if (!axes || !shifts || na != ns) return false;
    for (int d = 0; d < r; d++) shift[d] = 0;
    for (int k = 0; k < na; k++) {
        int64_t a = axes[k];
        if (!kiln_norm_axis(&a, r) || a == r - 1 || shift[a] != 0) return false;
        shift[a] = shifts[k];
    }
    return true;
}

/* Pad n's end pads on the rank-r input (zeros appended); false for anything else. */
static bool pad_ends(const rg_ctx *p, const kiln_node *n, int r, int64_t *pad) {
    const char *mode = kiln_attr_string(n, "mode", "constant");
    int64_t pads[2 * KILN_MAX_DIMS];
    if (n->opset < 11 || strcmp(mode, "constant") != 0 || n->n_in < 2 || kiln_pass_opt_in(n, 3) >= 0 ||
        kiln_pass_probe_ints(&p->pv, n->in[1], pads, 2 * KILN_MAX_DIMS) != 2 * r)
        return false;
    if (!kiln_pass_probe_zero(&p->pv, kiln_pass_opt_in(n, 2))) return false;
    for (int d = 0; d < r; d++) {
        if (pads[d] != 0 || pads[r + d] < 0) return false;
        pad[d] = pads[r + d];
    }
    return pad[r - 1] == 0;
}

/* Slice n (opset 10+) as a crop from 0 of the rank-r value whose dims are `dims`: each
 * axis's kept size into size[] (-1: whole); false for anything else (a start other than 0,
 * a step other than 1, the last axis cut, an axis whose size depends on the batch cut). */
static bool slice_crop(const rg_ctx *p, const kiln_node *n, int r, const int64_t *dims, int64_t *size) {
    int64_t st[KILN_MAX_DIMS], en[KILN_MAX_DIMS], ax[KILN_MAX_DIMS], sp[KILN_MAX_DIMS];
    if (n->opset < 10 || n->n_in < 3) return false;
    const int k = kiln_pass_probe_ints(&p->pv, n->in[1], st, KILN_MAX_DIMS);
    if (k < 1 || kiln_pass_probe_ints(&p->pv, n->in[2], en, KILN_MAX_DIMS) != k) return false;
    const int ia = kiln_pass_opt_in(n, 3), is = kiln_pass_opt_in(n, 4);
    if (ia >= 0 && kiln_pass_probe_ints(&p->pv, ia, ax, KILN_MAX_DIMS) != k) return false;
    if (is >= 0 && kiln_pass_probe_ints(&p->pv, is, sp, KILN_MAX_DIMS) != k) return false;
    for (int d = 0; d < r; d++) size[d] = -1;
    for (int q = 0; q < k; q++) {
        int64_t a = ia >= 0 ? ax[q] : q;
        if (!kiln_norm_axis(&a, r) || st[q] != 0 || (is >= 0 && sp[q] != 1) || size[a] != -1) return false;
        int64_t e = en[q];
        if (dims[a] < 0) return false;
        if (e < 0) e += dims[a];
        if (e < 0) e = 0;
        if (e >= dims[a]) continue;    /* the whole axis */
        if (a == r - 1) return false;  /* the row cut */
        size[a] = e;
    }
    return true;
}

/* Whether Transpose perm (rank r, dims of its input) moves bytes: the axes of size other
 * than 1 change order. Unknown sizes count as moving. */
static bool perm_moves(const int64_t *perm, int r, const int64_t *dims) {
    int last = -1;
    for (int k = 0; k < r; k++) {
        if (dims[perm[k]] == 1) continue;
        if (perm[k] < last) return true;
        last = (int)perm[k];
    }
    return false;
}

/* ------------------------------------------- composing views and permutations */

#define MAXA 16  /* atoms while composing (the op takes at most KILN_MAX_DIMS) */
#define MAXC 24  /* nodes of one chain */

/* A chain of views and permutations of X' as atoms: sub-dims of X' (in its storage order,
 * xorder) that every stage keeps whole; each current dim is a run of atoms, major to minor,
 * and the current tensor's bytes are the atoms in that order. A Reshape whose dim boundary
 * falls inside an atom splits it (when the sizes divide); so any chain of Reshapes and
 * Transposes is X' viewed as its atoms, permuted, and viewed as the result. */
typedef struct compose {
    int na;                      /* atoms made */
    int64_t size[MAXA];
    int xorder[MAXA];            /* atom ids in X' order */
    int nd;                      /* current dims */
    int len[KILN_MAX_DIMS];
    int at[KILN_MAX_DIMS][MAXA];
} compose;

static bool c_init(compose *c, int r, const int64_t *dims) {
    memset(c, 0, sizeof *c);
    c->nd = r;
    for (int d = 0; d < r; d++) {
        if (dims[d] < 1) return false;
        if (dims[d] == 1) continue;
        c->size[c->na] = dims[d];
        c->xorder[c->na] = c->na;
        c->at[d][c->len[d]++] = c->na++;
    }
    return true;
}

static bool c_transpose(compose *c, int r, const int64_t *perm) {
    if (r != c->nd) return false;
    compose t = *c;
    for (int k = 0; k < r; k++) {
        if (perm[k] < 0 || perm[k] >= r) return false;
        t.len[k] = c->len[perm[k]];
        memcpy(t.at[k], c->at[perm[k]], sizeof t.at[k]);
    }
    *c = t;
    return true;
}

/* Atom a split into a (size major, kept) and a new atom after it in X' order; the new id. */
static int c_split(compose *c, int a, int64_t major) {
    if (c->na >= MAXA) return -1;
    const int b = c->na++;
    c->size[b] = c->size[a] / major;
    c->size[a] = major;
    int pos = 0;
    while (c->xorder[pos] != a) pos++;
    memmove(&c->xorder[pos + 2], &c->xorder[pos + 1], (size_t)(c->na - 2 - pos) * sizeof c->xorder[0]);
    c->xorder[pos + 1] = b;
    return b;
}

static bool c_reshape(compose *c, int r, const int64_t *dims) {
    int seq[MAXA], ns = 0, len[KILN_MAX_DIMS] = {0}, at[KILN_MAX_DIMS][MAXA];
    if (r < 1 || r > KILN_MAX_DIMS) return false;
    for (int d = 0; d < c->nd; d++)
        for (int k = 0; k < c->len[d]; k++) seq[ns++] = c->at[d][k];
    int pos = 0;
    for (int j = 0; j < r; j++) {
        if (dims[j] < 1) return false;
        int64_t need = dims[j];
        while (need > 1) {
            if (pos >= ns) return false;
            const int a = seq[pos];
            const int64_t s = c->size[a];
            if (s <= need) {
                if (need % s) return false;
                need /= s;
            } else { /* the boundary inside atom a: its major part here, the rest next */
                const int b = s % need ? -1 : c_split(c, a, need);
                if (b < 0) return false;
                memmove(&seq[pos + 2], &seq[pos + 1], (size_t)(ns - pos - 1) * sizeof seq[0]);
                seq[pos + 1] = b;
                ns++;
                need = 1;
            }
            at[j][len[j]++] = a;
            pos++;
        }
    }
    if (pos != ns) return false;
    c->nd = r;
    memcpy(c->len, len, sizeof len);
    memcpy(c->at, at, sizeof at);
    return true;
}

/* The composed gather: view (atoms in X' order, neighbours that stay neighbours merged, the
 * row atom kept alone), perm over them, and the result's dims; false where the row (X''s
 * last dim, one atom of size row) does not end the result as its last dim alone. */
typedef struct composed {
    int rv, rw;
    int64_t view[KILN_MAX_DIMS], perm[KILN_MAX_DIMS], w[KILN_MAX_DIMS];
} composed;

static bool c_result(const compose *c, int64_t row, composed *out) {
    if (c->na < 1 || c->nd < 1 || row < 2) return false;
    const int last = c->xorder[c->na - 1];
    if (c->size[last] != row || c->len[c->nd - 1] != 1 || c->at[c->nd - 1][0] != last) return false;
    int xpos[MAXA], seq[MAXA], ns = 0;
    for (int k = 0; k < c->na; k++) xpos[c->xorder[k]] = k;
    for (int d = 0; d < c->nd; d++)
        for (int k = 0; k < c->len[d]; k++) seq[ns++] = xpos[c->at[d][k]];
    if (ns != c->na) return false;
    /* group: a run of X' positions consecutive in the result too (not the row) */
    int group[MAXA], ng = 0, gstart[MAXA];
    for (int k = 0; k < ns; k++) {
        if (k > 0 && seq[k] == seq[k - 1] + 1 && seq[k] != c->na - 1) {
            group[seq[k]] = group[seq[k - 1]];
            continue;
        }
        group[seq[k]] = ng;
        gstart[ng++] = seq[k];
    }
    if (ng > KILN_MAX_DIMS) return false;
    /* groups in X' order: each group's first position orders them */
    int order[MAXA], rank[MAXA];
    for (int g = 0; g < ng; g++) order[g] = g;
    for (int i = 1; i < ng; i++)
        for (int j = i; j > 0 && gstart[order[j]] < gstart[order[j - 1]]; j--) {
            const int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int g = 0; g < ng; g++) rank[order[g]] = g;
    for (int g = 0; g < ng; g++) out->view[g] = 1;
    for (int k = 0; k < c->na; k++) out->view[rank[group[k]]] *= c->size[c->xorder[k]];
    int np = 0;
    for (int k = 0; k < ns; k++)
        if (k == 0 || group[seq[k]] != group[seq[k - 1]]) out->perm[np++] = rank[group[seq[k]]];
    out->rv = ng;
    out->rw = c->nd;
    for (int d = 0; d < c->nd; d++) {
        out->w[d] = 1;
        for (int k = 0; k < c->len[d]; k++) out->w[d] *= c->size[c->at[d][k]];
    }
    return true;
}

/* The middle of a chain: views, permutations and layout conversions. */
enum mid { MID_NONE, MID_VIEW, MID_PERM, MID_TO_NCHW, MID_TO_NHWC };

static enum mid mid_of(const kiln_node *n) {
    if (n->n_in < 1 || n->n_out != 1 || n->in[0] < 0 || n->out[0] < 0) return MID_NONE;
    /* op-pattern: the views (Reshape's and Flatten's dims, Squeeze's and Unsqueeze's axes: the
     * output's dims say it all) */
    if (kiln_pass_is(n, "Reshape") || kiln_pass_is(n, "Flatten") || kiln_pass_is(n, "Squeeze") ||
        kiln_pass_is(n, "Unsqueeze") || kiln_pass_is(n, "Identity"))
        return MID_VIEW;
    /* op-pattern: Transpose */
    if (kiln_pass_is(n, "Transpose") && n->n_in == 1) return MID_PERM;
    /* op-pattern: the layout pass's conversions (plain ones: no Cast, no zero channels) */
    if (kiln_pass_is_kiln(n, "ToNCHW") && n->n_in == 1) return MID_TO_NCHW;
    if (kiln_pass_is_kiln(n, "ToNHWC") && n->n_in == 1 && !kiln_node_attr(n, "to") &&
        kiln_attr_int(n, "zero_channels", 0) == 0)
        return MID_TO_NHWC;
    return MID_NONE;
}

/* Whether 4-D value v has the same bytes in both layouts in a probe (C or H W of 1). */
static bool layout_free(const kiln_tensor *t) { return t->ndim == 4 && (t->dims[1] == 1 || t->dims[2] * t->dims[3] == 1); }

/* Compose mid nodes nodes[0..n) from X' (dims xd, rank rx) in probe vt: false where a stage
 * does not split into atoms. */
static bool compose_chain(const rg_ctx *p, const kiln_tensor *vt, const int *nodes, int n, int rx, const int64_t *xd,
                          int64_t row, composed *out) {
    compose c;
    if (!c_init(&c, rx, xd)) return false;
    static const int64_t to_nchw[4] = {0, 3, 1, 2}, to_nhwc[4] = {0, 2, 3, 1};
    for (int k = 0; k < n; k++) {
        const kiln_node *nd = &p->m->nodes[nodes[k]];
        const kiln_tensor *o = &vt[nd->out[0]];
        bool ok;
        switch (mid_of(nd)) {
        case MID_VIEW: ok = o->ndim >= 1 && c_reshape(&c, o->ndim, o->dims); break;
        case MID_TO_NCHW: ok = c_transpose(&c, 4, to_nchw); break;
        case MID_TO_NHWC: ok = c_transpose(&c, 4, to_nhwc); break;
        case MID_PERM: {
            int np = 0;
            const int64_t *perm = kiln_attr_ints(nd, "perm", &np);
            int64_t rev[KILN_MAX_DIMS];
            if (!perm) { /* the default: reversed */
                np = c.nd;
                for (int d = 0; d < np; d++) rev[d] = np - 1 - d;
                perm = rev;
            }
            ok = c_transpose(&c, np, perm);
            break;
        }
        default: ok = false;
        }
        if (!ok) return false;
    }
    return c_result(&c, row, out);
}

/* Whether node i can join a chain: not taken by another. */
static bool free_node(const bool *used, int i) { return i >= 0 && !used[i]; }

/* The chain through mid node t (each value in it read by the next node only), rewritten
 * where it qualifies; its nodes marked used either way. */
static kiln_status try_chain(rg_ctx *p, int t, bool *used, bool *dead, bool *changed) {
    kiln_model *m = p->m;
    int mid[MAXC], nm = 0;
    const int *prod = p->prod;
    /* backwards from t, then forwards: ToNCHW only first, ToNHWC only last */
    int first = t;
    while (nm < MAXC / 2 && mid_of(&m->nodes[first]) != MID_TO_NCHW) {
        const int v = m->nodes[first].in[0], q = inner(p, v) ? prod[v] : -1;
        if (!free_node(used, q) || mid_of(&m->nodes[q]) == MID_NONE || mid_of(&m->nodes[q]) == MID_TO_NHWC) break;
        first = q;
        nm++;
    }
    nm = 0;
    for (int i = first;;) {
        mid[nm++] = i;
        used[i] = true;
        if (mid_of(&m->nodes[i]) == MID_TO_NHWC || nm >= MAXC) break;
        const int q = reader_of(p, m->nodes[i].out[0]);
        if (!free_node(used, q) || mid_of(&m->nodes[q]) == MID_NONE || mid_of(&m->nodes[q]) == MID_TO_NCHW ||
            m->nodes[q].in[0] != m->nodes[i].out[0])
            break;
        i = q;
    }
    const bool in_nhwc = mid_of(&m->nodes[mid[0]]) == MID_TO_NCHW;
    int x = m->nodes[mid[0]].in[0];
    int64_t tmp[KILN_MAX_DIMS];
    const int rx = dims_of(p, x, tmp);
    /* pre: a kiln.Roll, then a Pad behind it (not before a layout conversion) */
    int rl = -1, pd = -1;
    int64_t shift[KILN_MAX_DIMS] = {0}, pad[KILN_MAX_DIMS] = {0};
    int pr = inner(p, x) ? prod[x] : -1;
    /* op-pattern: kiln.Roll of whole rows before the chain */
    if (!in_nhwc && rx >= 1 && free_node(used, pr) && kiln_pass_is_kiln(&m->nodes[pr], "Roll") &&
        m->nodes[pr].n_in == 1 && m->nodes[pr].in[0] >= 0 && roll_shifts(&m->nodes[pr], rx, shift)) {
        rl = pr;
        x = m->nodes[pr].in[0];
        pr = inner(p, x) ? prod[x] : -1;
    }
    /* op-pattern: Pad of zeros at the ends of axes other than the last, before that */
    if (!in_nhwc && rx >= 1 && free_node(used, pr) && kiln_pass_is(&m->nodes[pr], "Pad") && m->nodes[pr].in[0] >= 0 &&
        dims_of(p, m->nodes[pr].in[0], tmp) == rx && pad_ends(p, &m->nodes[pr], rx, pad)) {
        pd = pr;
        x = m->nodes[pr].in[0];
    }
    if (rx < 1 || dims_of(p, x, tmp) != rx || (in_nhwc && rx != 4)) return KILN_OK;
    /* values inside whose Shape readers cannot do without them: before the chain, no pre
     * stages; in it, the chain ends there */
    bool can = true;
    kiln_status st = KILN_OK;
    for (int q = 0; q < 2 && can && !st; q++)
        if ((q == 0 ? pd : rl) >= 0) st = shapes_rewire(p, m->nodes[q == 0 ? pd : rl].out[0], x, false, &can);
    if (!can) {
        pd = rl = -1;
        memset(pad, 0, sizeof pad);
        memset(shift, 0, sizeof shift);
        x = m->nodes[mid[0]].in[0];
    }
    for (int k = 0; k + 1 < nm && !st; k++) {
        st = shapes_rewire(p, m->nodes[mid[k]].out[0], x, false, &can);
        if (!can) nm = k + 1;
    }
    if (st) return st;
    /* X' (S: padded) in each probe, and the chain composed in each; where a stage does not
     * compose, the chain up to it */
    const kiln_tensor *vt[2] = {p->pv.a, p->pv.b};
    composed cp[2];
    int64_t sd[2][KILN_MAX_DIMS];
    for (int q = 0; q < 2; q++) {
        const kiln_tensor *xt = &vt[q][x];
        for (int d = 0; d < rx; d++) sd[q][d] = xt->dims[d] + pad[d];
        if (in_nhwc) {
            sd[q][1] = xt->dims[2];
            sd[q][2] = xt->dims[3];
            sd[q][3] = xt->dims[1];
        }
    }
    const int64_t row = sd[0][rx - 1];
    if (row != sd[1][rx - 1]) return KILN_OK;
    int n = nm;
    while (n > 0 && !(compose_chain(p, vt[0], mid, n, rx, sd[0], row, &cp[0]) &&
                      compose_chain(p, vt[1], mid, n, rx, sd[1], row, &cp[1])))
        n--;
    if (n < 1) return KILN_OK;
    const bool out_nhwc = mid_of(&m->nodes[mid[n - 1]]) == MID_TO_NHWC;
    int y = m->nodes[mid[n - 1]].out[0], last = mid[n - 1];
    /* the two probes agree but for one dim of the view and one of the result (the batch) */
    if (cp[0].rv != cp[1].rv || cp[0].rw != cp[1].rw ||
        memcmp(cp[0].perm, cp[1].perm, sizeof cp[0].perm[0] * (size_t)cp[0].rv))
        return KILN_OK;
    int64_t view[KILN_MAX_DIMS], oview[KILN_MAX_DIMS];
    int dv = 0, dw = 0;
    for (int k = 0; k < cp[0].rv; k++) dv += (view[k] = cp[0].view[k] == cp[1].view[k] ? cp[0].view[k] : -1) < 0;
    for (int k = 0; k < cp[0].rw; k++) dw += (oview[k] = cp[0].w[k] == cp[1].w[k] ? cp[0].w[k] : -1) < 0;
    if (dv > 1 || dw > 1) return KILN_OK;
    const int rw = cp[0].rw;
    /* copies: the permutations and conversions that move bytes, the pad, the rolls, crops */
    int copies = 0;
    for (int k = 0; k < n; k++) {
        const kiln_node *nd = &m->nodes[mid[k]];
        const kiln_tensor *in = &p->pv.a[nd->in[0]];
        const enum mid kind = mid_of(nd);
        if (kind == MID_TO_NCHW || kind == MID_TO_NHWC) copies += !layout_free(in);
        if (kind == MID_PERM) {
            int np = 0;
            const int64_t *perm = kiln_attr_ints(nd, "perm", &np);
            copies += !perm || np != in->ndim || perm_moves(perm, in->ndim, in->dims);
        }
    }
    bool pads = false, rolls = false;
    for (int d = 0; d < rx; d++) {
        pads |= pad[d] != 0;
        rolls |= shift[d] != 0;
    }
    copies += pads + rolls;
    /* post (the whole chain composed, not after a layout conversion): a kiln.Roll, then
     * Slices from 0 */
    int post[KILN_MAX_DIMS + 1], npost = 0, rd = reader_of(p, y);
    int64_t oshift[KILN_MAX_DIMS] = {0}, osize[KILN_MAX_DIMS];
    for (int d = 0; d < rw; d++) osize[d] = -1;
    bool orolls = false, crops = false;
    /* op-pattern: kiln.Roll of whole rows after the chain */
    bool fits = true;
    if (!out_nhwc && n == nm && free_node(used, rd) && kiln_pass_is_kiln(&m->nodes[rd], "Roll") &&
        m->nodes[rd].in[0] == y && roll_shifts(&m->nodes[rd], rw, oshift) &&
        !(st = shapes_rewire(p, y, x, false, &fits)) && fits) {
        for (int d = 0; d < rw; d++) orolls |= oshift[d] != 0;
        post[npost++] = rd;
        y = m->nodes[rd].out[0];
        rd = reader_of(p, y);
    }
    copies += orolls;
    /* op-pattern: Slices from 0 (crops) after it, on axes other than the last */
    while (!out_nhwc && n == nm && npost < KILN_MAX_DIMS && free_node(used, rd) && kiln_pass_is(&m->nodes[rd], "Slice") &&
           m->nodes[rd].in[0] == y && m->nodes[rd].n_out == 1) {
        int64_t cut[KILN_MAX_DIMS], yd[KILN_MAX_DIMS];
        if (dims_of(p, y, yd) != rw || !slice_crop(p, &m->nodes[rd], rw, yd, cut) ||
            (st = shapes_rewire(p, y, x, false, &fits)) || !fits)
            break;
        bool c = false;
        for (int d = 0; d < rw; d++)
            if (cut[d] >= 0) {
                osize[d] = osize[d] < 0 || cut[d] < osize[d] ? cut[d] : osize[d];
                c = true;
            }
        copies += c;
        crops |= c;
        post[npost++] = rd;
        y = m->nodes[rd].out[0];
        rd = reader_of(p, y);
    }
    if (st) return st;
    if (npost > 0) last = post[npost - 1];
    /* worth it: two copies become one, or one becomes none (a composite that moves no row
     * is a view: alias_when) */
    bool moves = pads || rolls || orolls || crops;
    for (int k = 0; k < cp[0].rv; k++) moves |= cp[0].perm[k] != k;
    if (copies < (moves ? 2 : 1)) return KILN_OK;
    /* one dtype; 4-D values in the layout the chain says (X and Y at its ends, NCHW inside) */
    const kiln_dtype dt = p->pv.a[x].dtype;
    int vals[MAXC + 12], nvals = 0;
    vals[nvals++] = x;
    if (pd >= 0) vals[nvals++] = m->nodes[pd].out[0];
    if (rl >= 0) vals[nvals++] = m->nodes[rl].out[0];
    for (int k = 0; k < n; k++) vals[nvals++] = m->nodes[mid[k]].out[0];
    for (int k = 0; k < npost; k++) vals[nvals++] = m->nodes[post[k]].out[0];
    for (int k = 0; k < nvals; k++) {
        const kiln_tensor *v = &p->pv.a[vals[k]];
        const bool want_nhwc = (k == 0 && in_nhwc) || (k == nvals - 1 && out_nhwc);
        if (v->dtype != dt ||
            (v->ndim == 4 && (m->values[vals[k]].format == KILN_FORMAT_NHWC) != want_nhwc && !layout_free(v)))
            return KILN_OK;
    }
    /* the Shapes of the values that go, computed without them (each was checked) */
    for (int k = 1; k < nvals - 1 && !st; k++) {
        bool ok = true;
        st = shapes_rewire(p, vals[k], x, true, &ok);
    }
    /* the last node becomes the gather of x */
    if (!st) st = kiln_pass_rewrite(m, last, "kiln", "RowGather", 1, &x, NULL);
    kiln_node *g = &m->nodes[last];
    if (!st && in_nhwc) st = kiln_node_set_int(g, "in_nhwc", 1);
    if (!st && out_nhwc) st = kiln_node_set_int(g, "out_nhwc", 1);
    if (!st && pads) st = kiln_node_set_ints(g, "pads", rx, pad);
    if (!st && rolls) st = kiln_node_set_ints(g, "shifts", rx, shift);
    if (!st) st = kiln_node_set_ints(g, "view", cp[0].rv, view);
    if (!st) st = kiln_node_set_ints(g, "perm", cp[0].rv, cp[0].perm);
    if (!st) st = kiln_node_set_ints(g, "out_view", rw, oview);
    if (!st && orolls) st = kiln_node_set_ints(g, "out_shifts", rw, oshift);
    if (!st && crops) st = kiln_node_set_ints(g, "out_sizes", rw, osize);
    if (st) return st;
    if (pd >= 0) dead[pd] = used[pd] = true;
    if (rl >= 0) dead[rl] = used[rl] = true;
    for (int k = 0; k < n; k++) dead[mid[k]] = true;
    for (int k = 0; k < npost; k++) dead[post[k]] = used[post[k]] = true;
    dead[last] = false;
    *changed = true;
    return KILN_OK;
}

kiln_status kiln_pass_row_gather(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (!kiln_pass_device_has(o, "RowGather")) return KILN_OK;
    const int nn = m->n_nodes;
    bool any = false;
    for (int i = 0; i < nn && !any; i++) any = mid_of(&m->nodes[i]) > MID_VIEW;
    if (!any) return KILN_OK;
    rg_ctx p = {.m = m, .nn = nn};
    bool *dead = calloc((size_t)nn + 1, sizeof *dead), *used = calloc((size_t)nn + 1, sizeof *used);
    kiln_status st = kiln_pass_value_probes(m, &p.pv);
    if (!st) {
        p.prod = kiln_pass_producers(m);
        p.other = calloc((size_t)p.pv.n + 1, sizeof *p.other);
        p.reader = calloc((size_t)p.pv.n + 1, sizeof *p.reader);
        if (!p.prod || !p.other || !p.reader || !dead || !used)
            st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "row-gather: out of memory");
    } else if (st != KILN_ERR_OUT_OF_MEMORY) {
        st = KILN_OK; /* shapes not inferable: the graph stays as it is */
        goto out;
    }
    if (st == KILN_OK) {
        for (int i = 0; i < nn; i++)
            for (int k = 0; k < m->nodes[i].n_in && !plain_shape(&m->nodes[i]); k++) {
                const int v = m->nodes[i].in[k];
                if (v < 0 || v >= p.pv.n) continue;
                p.other[v]++;
                p.reader[v] = i;
            }
        bool made = false;
        for (int i = 0; i < nn && !st; i++) /* from each copy among the chains' middle nodes */
            if (!used[i] && mid_of(&m->nodes[i]) > MID_VIEW) st = try_chain(&p, i, used, dead, &made);
        if (!st && made) {
            *changed = true;
            st = kiln_pass_remove_sorted(m, dead, nn);
        }
    }
out:
    kiln_pass_value_probes_free(&p.pv);
    free(p.prod);
    free(p.other);
    free(p.reader);
    free(dead);
    free(used);
    return st;
}
