/*
 * row_gather.c — a chain of whole-row moves around a Transpose as one kiln.RowGather
 * (src/ops/row_gather.c): one read and one write of the tensor where the chain made up to
 * five copies.
 *
 * Swin's window attention (v1 and v2, torchvision's) partitions each block's input as
 * Pad (the end of H and W to a multiple of the window) -> kiln.Roll (the shifted blocks;
 * src/passes/roll.c) -> Reshape (B, H/w, w, W/w, w, C) -> Transpose (0, 1, 3, 2, 4, 5) ->
 * Reshape (B nW, w w, C), and reverses it after the attention as Reshape -> Transpose ->
 * Reshape -> kiln.Roll -> Slice (H) -> Slice (W). Pads, rolls, crops and the window
 * permutation each copy the whole activation (swin_v2_s at batch 256: 5.2 of 24.6 ms on an
 * H200); none of them touches C, the innermost dim, so every output row is one input row or
 * zeros, and one gather of rows does the chain.
 *
 * Matched, from each Transpose whose perm keeps the last axis last: backwards, a Reshape
 * keeping the last dim, then a kiln.Roll, then a Pad (each optional, in that order, each
 * output read by the next node only); forwards, a Reshape keeping the last dim, a kiln.Roll,
 * and Slices from 0 with step 1 (each optional, in that order, each read only by the next).
 * Pads: mode constant, value 0 or absent, no axes input, none at the start of an axis nor on
 * the last axis, the same in two shape probes (exporters compute them from Shape at run
 * time). Rolls and Slices leave the last axis alone; a Slice crops only an axis whose size
 * does not depend on the batch. The Reshapes' shapes are taken from their outputs: dims that
 * two probes agree on as they are, and one that differs (the batch) as -1. Every value of
 * the chain has one dtype, and its 4-D values the logical layout (the pass runs after the
 * layout pass). A chain is replaced only where it makes at least two copies (a zero Pad, a
 * Slice of a whole axis and a Transpose of size-1 axes copy nothing): a Transpose alone stays
 * the Transpose kernel's. The last node of the chain becomes the kiln.RowGather with the
 * chain's output; the others go. Runs where the device has the op (CPU and CUDA).
 */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct rg_ctx {
    kiln_model *m;
    int nv;               /* values the probes hold */
    kiln_tensor *va, *vb; /* two probes' values (kiln_pass_infer_values at 320 and 448) */
    kiln_tensor **ha, **hb;
    int *readers;         /* node inputs reading each value */
} rg_ctx;

/* The rank of v and its dims: those both probes agree on, -1 where they differ; -1 when
 * the rank is not known. */
static int dims_of(const rg_ctx *p, int v, int64_t *dims) {
    if (v < 0 || v >= p->nv) return -1;
    const kiln_tensor *a = &p->va[v], *b = &p->vb[v];
    if (a->ndim < 1 || a->ndim != b->ndim || a->ndim > KILN_MAX_DIMS) return -1;
    for (int d = 0; d < a->ndim; d++) dims[d] = a->dims[d] == b->dims[d] ? a->dims[d] : -1;
    return a->ndim;
}

/* Whether v is read by exactly one node input and is no graph output: a value inside the
 * chain, which no other reader may need. */
static bool inner(const rg_ctx *p, int v) {
    return v >= 0 && v < p->nv && p->readers[v] == 1 && !p->m->values[v].is_output;
}

/* The node reading inner value v, or -1. */
static int reader_of(const rg_ctx *p, int v) { return inner(p, v) ? kiln_pass_single_consumer(p->m, v) : -1; }

/* A Reshape's output dims as a view of a tensor whose rows have `row` elements: dims known
 * whatever the batch as they are, at most one unknown (as -1); the last must be the row. */
static int view_of(const rg_ctx *p, int v, int64_t row, int64_t *dims) {
    const int r = dims_of(p, v, dims);
    int unknown = 0;
    for (int d = 0; d < r; d++) unknown += dims[d] < 0;
    return r >= 1 && unknown <= 1 && row > 0 && dims[r - 1] == row ? r : -1;
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
        kiln_pass_probe_ints(p->va, p->vb, p->nv, n->in[1], pads, 2 * KILN_MAX_DIMS) != 2 * r)
        return false;
    const int cv = kiln_pass_opt_in(n, 2);
    if (cv >= 0) {
        const kiln_tensor *a = cv < p->nv ? &p->va[cv] : NULL, *b = cv < p->nv ? &p->vb[cv] : NULL;
        if (!a || !a->data || !b->data || kiln_tensor_numel(a) != 1 || kiln_get_f64(a, 0) != 0 ||
            kiln_get_f64(b, 0) != 0)
            return false;
    }
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
    const int k = kiln_pass_probe_ints(p->va, p->vb, p->nv, n->in[1], st, KILN_MAX_DIMS);
    if (k < 1 || kiln_pass_probe_ints(p->va, p->vb, p->nv, n->in[2], en, KILN_MAX_DIMS) != k) return false;
    const int ia = kiln_pass_opt_in(n, 3), is = kiln_pass_opt_in(n, 4);
    if (ia >= 0 && kiln_pass_probe_ints(p->va, p->vb, p->nv, ia, ax, KILN_MAX_DIMS) != k) return false;
    if (is >= 0 && kiln_pass_probe_ints(p->va, p->vb, p->nv, is, sp, KILN_MAX_DIMS) != k) return false;
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

/* The chain around Transpose node t, rewritten where it qualifies. */
static kiln_status try_chain(rg_ctx *p, int t, bool *dead, bool *changed) {
    kiln_model *m = p->m;
    const kiln_node *tn = &m->nodes[t];
    if (tn->n_in != 1 || tn->n_out != 1 || tn->in[0] < 0 || tn->out[0] < 0 || dead[t]) return KILN_OK;
    int64_t tin[KILN_MAX_DIMS];
    const int rv = dims_of(p, tn->in[0], tin);
    int np = 0;
    const int64_t *perm = kiln_attr_ints(tn, "perm", &np);
    if (rv < 2 || !perm || np != rv || perm[rv - 1] != rv - 1) return KILN_OK;
    const int64_t row = tin[rv - 1];
    if (row <= 0) return KILN_OK;
    const kiln_dtype dt = p->va[tn->in[0]].dtype;
    int nodes[8], nn = 0, copies = perm_moves(perm, rv, tin) ? 1 : 0;
    nodes[nn++] = t;
    /* backwards: Reshape, kiln.Roll, Pad */
    int x = tn->in[0], r1 = -1, rl = -1, pd = -1;
    int *prod = kiln_pass_producers(m);
    if (!prod) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "row-gather: out of memory");
    int pr = inner(p, x) ? prod[x] : -1;
    int64_t view[KILN_MAX_DIMS], xd[KILN_MAX_DIMS];
    /* op-pattern: Reshape keeping the row, read only by the Transpose */
    if (pr >= 0 && !dead[pr] && kiln_pass_is(&m->nodes[pr], "Reshape") && m->nodes[pr].n_in >= 1 &&
        m->nodes[pr].in[0] >= 0 && view_of(p, x, row, view) == rv && view_of(p, m->nodes[pr].in[0], row, xd) >= 1) {
        r1 = pr;
        x = m->nodes[pr].in[0];
        pr = inner(p, x) ? prod[x] : -1;
    }
    int rx = dims_of(p, x, xd);
    int64_t shift[KILN_MAX_DIMS] = {0}, pad[KILN_MAX_DIMS] = {0};
    /* op-pattern: kiln.Roll of whole rows, read only by the chain */
    if (rx >= 1 && pr >= 0 && !dead[pr] && kiln_pass_is_kiln(&m->nodes[pr], "Roll") && m->nodes[pr].n_in == 1 &&
        m->nodes[pr].in[0] >= 0 && roll_shifts(&m->nodes[pr], rx, shift)) {
        rl = pr;
        x = m->nodes[pr].in[0];
        pr = inner(p, x) ? prod[x] : -1;
    }
    bool rolls = false;
    for (int d = 0; d < rx; d++) rolls |= shift[d] != 0;
    copies += rolls;
    /* op-pattern: Pad of zeros at the ends of axes other than the last, read only by the chain */
    if (rx >= 1 && pr >= 0 && !dead[pr] && kiln_pass_is(&m->nodes[pr], "Pad") && m->nodes[pr].in[0] >= 0 &&
        dims_of(p, m->nodes[pr].in[0], xd) == rx && pad_ends(p, &m->nodes[pr], rx, pad)) {
        pd = pr;
        x = m->nodes[pr].in[0];
        bool pads = false;
        for (int d = 0; d < rx; d++) pads |= pad[d] != 0;
        copies += pads;
    }
    free(prod);
    if (rx < 1 || dims_of(p, x, xd) != rx || xd[rx - 1] != row) return KILN_OK;
    if (pd >= 0) nodes[nn++] = pd;
    if (rl >= 0) nodes[nn++] = rl;
    if (r1 >= 0) nodes[nn++] = r1;
    /* forwards: Reshape, kiln.Roll, Slices */
    int y = tn->out[0], last = t, rd = reader_of(p, y), r2 = -1;
    int64_t oview[KILN_MAX_DIMS], oshift[KILN_MAX_DIMS] = {0}, osize[KILN_MAX_DIMS];
    int rw = 0;
    /* op-pattern: Reshape keeping the row after the Transpose */
    if (rd >= 0 && !dead[rd] && kiln_pass_is(&m->nodes[rd], "Reshape") && m->nodes[rd].in[0] == y &&
        m->nodes[rd].n_out >= 1 && (rw = view_of(p, m->nodes[rd].out[0], row, oview)) >= 1) {
        r2 = rd;
        nodes[nn++] = rd;
        last = rd;
        y = m->nodes[rd].out[0];
        rd = reader_of(p, y);
    }
    int64_t yd[KILN_MAX_DIMS];
    rw = dims_of(p, y, yd);
    if (rw < 1 || yd[rw - 1] != row) return KILN_OK;
    for (int d = 0; d < rw; d++) osize[d] = -1;
    /* op-pattern: kiln.Roll of whole rows after the view */
    if (rd >= 0 && !dead[rd] && kiln_pass_is_kiln(&m->nodes[rd], "Roll") && m->nodes[rd].in[0] == y &&
        m->nodes[rd].n_out == 1 && roll_shifts(&m->nodes[rd], rw, oshift)) {
        bool r = false;
        for (int d = 0; d < rw; d++) r |= oshift[d] != 0;
        copies += r;
        nodes[nn++] = rd;
        last = rd;
        y = m->nodes[rd].out[0];
        rd = reader_of(p, y);
    }
    /* op-pattern: Slices from 0 (crops) after it, on axes other than the last */
    while (rd >= 0 && nn < 8 && !dead[rd] && kiln_pass_is(&m->nodes[rd], "Slice") && m->nodes[rd].in[0] == y &&
           m->nodes[rd].n_out == 1) {
        int64_t cut[KILN_MAX_DIMS];
        if (dims_of(p, y, yd) != rw || !slice_crop(p, &m->nodes[rd], rw, yd, cut)) break;
        bool crops = false;
        for (int d = 0; d < rw; d++)
            if (cut[d] >= 0) {
                osize[d] = osize[d] < 0 || cut[d] < osize[d] ? cut[d] : osize[d];
                crops = true;
            }
        copies += crops;
        nodes[nn++] = rd;
        last = rd;
        y = m->nodes[rd].out[0];
        rd = reader_of(p, y);
    }
    if (copies < 2) return KILN_OK;
    /* one dtype; 4-D values in the logical layout */
    int vals[16], nvals = 0;
    vals[nvals++] = x;
    for (int k = 0; k < nn; k++) vals[nvals++] = m->nodes[nodes[k]].out[0];
    for (int k = 0; k < nvals; k++)
        if (p->va[vals[k]].dtype != dt || (p->va[vals[k]].ndim == 4 && m->values[vals[k]].format != KILN_FORMAT_NCHW))
            return KILN_OK;
    /* the last node becomes the gather of x */
    kiln_status st = kiln_pass_rewrite(m, last, "kiln", "RowGather", 1, &x, NULL);
    kiln_node *g = &m->nodes[last];
    if (!st && pd >= 0) st = kiln_node_set_ints(g, "pads", rx, pad);
    if (!st && rolls) st = kiln_node_set_ints(g, "shifts", rx, shift);
    if (!st && r1 >= 0) st = kiln_node_set_ints(g, "view", rv, view);
    if (!st) st = kiln_node_set_ints(g, "perm", rv, perm);
    if (!st && r2 >= 0) st = kiln_node_set_ints(g, "out_view", rw, oview);
    bool orolls = false, crops = false;
    for (int d = 0; d < rw; d++) {
        orolls |= oshift[d] != 0;
        crops |= osize[d] >= 0;
    }
    if (!st && orolls) st = kiln_node_set_ints(g, "out_shifts", rw, oshift);
    if (!st && crops) st = kiln_node_set_ints(g, "out_sizes", rw, osize);
    if (st) return st;
    for (int k = 0; k < nn; k++)
        if (nodes[k] != last) dead[nodes[k]] = true;
    *changed = true;
    return KILN_OK;
}

kiln_status kiln_pass_row_gather(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (!kiln_pass_device_has(o, "RowGather")) return KILN_OK;
    const int nn = m->n_nodes;
    bool any = false;
    for (int i = 0; i < nn && !any; i++) any = kiln_pass_is(&m->nodes[i], "Transpose");
    if (!any) return KILN_OK;
    rg_ctx p = {.m = m, .nv = m->n_values};
    p.readers = calloc((size_t)p.nv + 1, sizeof *p.readers);
    bool *dead = calloc((size_t)nn + 1, sizeof *dead);
    kiln_status st = !p.readers || !dead ? kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "row-gather: out of memory")
                                         : KILN_OK;
    if (!st) st = kiln_pass_infer_values(m, 320, &p.va, &p.ha);
    if (!st) st = kiln_pass_infer_values(m, 448, &p.vb, &p.hb);
    if (st == KILN_OK) {
        for (int i = 0; i < nn; i++)
            for (int k = 0; k < m->nodes[i].n_in; k++)
                if (m->nodes[i].in[k] >= 0 && m->nodes[i].in[k] < p.nv) p.readers[m->nodes[i].in[k]]++;
        bool made = false;
        for (int i = 0; i < nn && !st; i++)
            if (kiln_pass_is(&m->nodes[i], "Transpose")) st = try_chain(&p, i, dead, &made);
        if (!st && made) {
            *changed = true;
            st = kiln_pass_remove_sorted(m, dead, nn);
        }
    } else if (st != KILN_ERR_OUT_OF_MEMORY) {
        st = KILN_OK; /* shapes not inferable: the graph stays as it is */
    }
    for (int v = 0; v < p.nv; v++) {
        if (p.ha) kiln_tensor_free(p.ha[v]);
        if (p.hb) kiln_tensor_free(p.hb[v]);
    }
    free(p.ha);
    free(p.hb);
    free(p.va);
    free(p.vb);
    free(p.readers);
    free(dead);
    return st;
}
