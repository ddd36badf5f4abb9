/*
 * channel_gather.c — chains of channel moves as one kiln.ChannelGather
 * (src/ops/channel_gather.c): each output channel one input channel or a zero.
 *
 * Channel moves: Concat along the channels of 4-D tensors, kiln.ChannelShuffle, Slice of
 * channels (step 1) and Pad of zero channels (the pad-channels pass's). ShuffleNet's block
 * ends Concat -> ChannelShuffle, and the next block starts with two Slices (its halves), one
 * padded to a multiple of 8 channels for the tensor cores: four copies of the feature map
 * (2.1 ms of ShuffleNet V2 x1.0's 3.9 at batch 256, fp16, an H100), where one read of the
 * two halves and one write of what the next convolutions read do it.
 *
 * Regions, in topological order: an unassigned channel move starts one; every reader of a
 * value the region computes that is a one-input move (ChannelShuffle, Slice, Pad), reading it
 * as its data input, joins, and so on forward. Concat joins only as a region's first node:
 * its other inputs could depend on a value the region computes (the next block's Concat
 * reads this block's half and the branch computed from the other half). A value of the
 * region is written when a node outside that some graph output needs reads it, or it is a
 * graph output; the rest are
 * never materialized. Regions of one node, and regions with neither a shuffle nor a Slice (a
 * Concat and a Pad: two vectorized copies), are left as they are. Each value's channels are
 * composed back to the region's inputs (Concat: by offset; shuffle: (c % g) * C/g + c / g;
 * Slice: start + c; Pad: c - before, zero outside), so the gather's map is exact.
 *
 * What it needs: 4-D values of one dtype and one layout (the layout pass's, which ran
 * before: the CUDA kernel reads either, all alike), channel counts known whatever the batch
 * (kiln_pass_known_dims), Slice starts / ends (and axes, steps) and Pad pads that are the
 * same under two shape probes (exporters compute chunk's bounds from Shape at run time),
 * Pad mode constant with value 0, at most KILN_CHANNEL_GATHER_MAX_IO inputs and outputs and
 * KILN_CHANNEL_GATHER_MAX_MAP output channels. On devices without the kernel, nothing.
 * The same function: every output element is the element it was, moved once instead of
 * several times.
 */
#include "passes.h"
#include "../ops/channel_gather.h"

#include <stdlib.h>
#include <string.h>

#define SHIFT KILN_CHANNEL_GATHER_SHIFT
#define MAXR 32 /* nodes in a region */

typedef struct pctx {
    kiln_model *m;
    kiln_tensor *known;   /* kiln_pass_known_dims */
    kiln_value_probes pv; /* two probes' values (kiln_pass_value_probes) */
    int nk, nv;           /* values known / the probes hold (the fold adds initializers between) */
} pctx;

/* The channel count of 4-D value v, or -1. */
static int64_t channels(const pctx *p, int v) {
    if (v < 0 || v >= p->nk || p->known[v].ndim != 4) return -1;
    const int64_t c = p->known[v].dims[1];
    return c > 0 && c < SHIFT ? c : -1;
}

/* Constant i64 / i32 value v (its n elements into out, at most 8), the same in both probes. */
static int const_ints(const pctx *p, int v, int64_t *out, int max) { return kiln_pass_probe_ints(&p->pv, v, out, max); }

enum move { M_NONE, M_CONCAT, M_SHUFFLE, M_SLICE, M_PAD };

/* Which move node n is, with its parameter a: the shuffle's groups, the Slice's start, the
 * Pad's channels before (the output's channel count gives the rest). */
static enum move move_of(const pctx *p, const kiln_node *n, int64_t *a) {
    if (n->n_out != 1 || n->out[0] < 0 || n->n_in < 1 || n->in[0] < 0) return M_NONE;
    const int64_t cy = channels(p, n->out[0]), cx = channels(p, n->in[0]);
    if (cy < 0 || cx < 0) return M_NONE;
    if (kiln_pass_is(n, "Concat")) {
        int64_t ax = kiln_attr_int(n, "axis", 0);
        if (!kiln_norm_axis(&ax, 4) || ax != 1 || n->n_in > KILN_CHANNEL_GATHER_MAX_IO) return M_NONE;
        for (int k = 0; k < n->n_in; k++)
            if (channels(p, n->in[k]) < 0) return M_NONE;
        return M_CONCAT;
    }
    if (kiln_pass_is_kiln(n, "ChannelShuffle")) {
        *a = kiln_attr_int(n, "groups", 1);
        return *a >= 1 && cx == cy && cx % *a == 0 ? M_SHUFFLE : M_NONE;
    }
    if (kiln_pass_is(n, "Slice")) { /* opset 10+: data, starts, ends, axes, steps */
        int64_t st[8], en[8], ax[8] = {0}, sp[8] = {1};
        if (n->n_in < 3 || const_ints(p, n->in[1], st, 8) != 1 || const_ints(p, n->in[2], en, 8) != 1) return M_NONE;
        const int na = kiln_pass_opt_in(n, 3) < 0 ? -2 : const_ints(p, n->in[3], ax, 8);
        const int ns = kiln_pass_opt_in(n, 4) < 0 ? -2 : const_ints(p, n->in[4], sp, 8);
        if (na != 1 || (ns != -2 && (ns != 1 || sp[0] != 1)) || !kiln_norm_axis(&ax[0], 4) || ax[0] != 1)
            return M_NONE;
        int64_t lo = st[0] < 0 ? st[0] + cx : st[0], hi = en[0] < 0 ? en[0] + cx : en[0];
        lo = lo < 0 ? 0 : lo > cx ? cx : lo;
        hi = hi < 0 ? 0 : hi > cx ? cx : hi;
        if (hi - lo != cy) return M_NONE;
        *a = lo;
        return M_SLICE;
    }
    if (kiln_pass_is(n, "Pad")) { /* opset 11+: data, pads, constant_value, axes */
        const char *mode = kiln_attr_string(n, "mode", "constant");
        int64_t pads[8];
        if (strcmp(mode, "constant") != 0 || n->n_in < 2 || kiln_pass_opt_in(n, 3) >= 0 ||
            const_ints(p, n->in[1], pads, 8) != 8 || !kiln_pass_probe_zero(&p->pv, kiln_pass_opt_in(n, 2)))
            return M_NONE;
        for (int d = 0; d < 8; d++)
            if ((d % 4 != 1 && pads[d] != 0) || pads[d] < 0) return M_NONE;
        if (cx + pads[1] + pads[5] != cy) return M_NONE;
        *a = pads[1];
        return M_PAD;
    }
    return M_NONE;
}

/* One region: its nodes, inputs, written outputs and every value's map. */
typedef struct region {
    int nodes[MAXR], n_nodes;
    int in[KILN_CHANNEL_GATHER_MAX_IO], n_in;
    bool moves;        /* a shuffle or a Slice among the nodes */
    int vals[MAXR];    /* values computed, with their maps */
    int64_t *maps[MAXR];
    int n_vals;
} region;

static int64_t *map_of(const region *r, int v) {
    for (int k = 0; k < r->n_vals; k++)
        if (r->vals[k] == v) return r->maps[k];
    return NULL;
}

static void region_free(region *r) {
    for (int k = 0; k < r->n_vals; k++) free(r->maps[k]);
    r->n_vals = 0;
}

/* The map (C channels) of the output of move mv (parameter a: groups, Slice start or Pad
 * channels before) of a value of cx channels whose map is src; src NULL: the identity. */
static void compose(int64_t *mp, int64_t C, enum move mv, const int64_t *src, int64_t cx, int64_t a) {
    for (int64_t c = 0; c < C; c++) {
        int64_t from = -1; /* the input channel, or -1: zero */
        switch (mv) {
        case M_SHUFFLE: from = (c % a) * (cx / a) + c / a; break;
        case M_SLICE: from = a + c; break;
        case M_PAD: from = c < a || c >= a + cx ? -1 : c - a; break;
        default: break;
        }
        mp[c] = from < 0 ? -1 : src ? src[from] : from;
    }
}

/* Add value v (C channels), computed by compose, to r; false on OOM. */
static bool add_value(region *r, int v, int64_t C, enum move mv, const int64_t *src, int64_t cx, int64_t a) {
    int64_t *mp = C > 0 ? malloc((size_t)C * sizeof *mp) : NULL;
    if (!mp || r->n_vals >= MAXR) {
        free(mp);
        return false;
    }
    compose(mp, C, mv, src, cx, a);
    r->vals[r->n_vals] = v;
    r->maps[r->n_vals++] = mp;
    return true;
}

/* Gather(Shape(v), k) with k a constant and v's dim k known whatever the batch (known holds
 * nk values), as a constant: exporters compute chunk's bounds from Shape(v)[1], and a Shape
 * reading v would make v a value to write. The Gather's readers read the constant instead;
 * the Gather, and the Shape if nothing else reads it, are left to the dead-nodes sweep. */
static kiln_status fold_shape_gathers(kiln_model *m, const kiln_tensor *known, int nk, bool *changed) {
    const int nn = m->n_nodes;
    int *prod = kiln_pass_producers(m);
    if (!prod) return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = KILN_OK;
    for (int i = 0; i < nn && !st; i++) {
        const kiln_node *g = &m->nodes[i];
        if (!kiln_pass_is(g, "Gather") || g->n_in != 2 || g->n_out != 1 || g->out[0] < 0 || g->in[0] < 0 ||
            kiln_attr_int(g, "axis", 0) != 0 || m->values[g->out[0]].is_output)
            continue;
        const int sh = prod[g->in[0]];
        const kiln_tensor *idx = kiln_pass_constant(m, prod, g->in[1]);
        if (sh < 0 || !idx || idx->ndim > 1 || kiln_tensor_numel(idx) != 1 ||
            (idx->dtype != KILN_I64 && idx->dtype != KILN_I32))
            continue;
        const kiln_node *s = &m->nodes[sh];
        if (!kiln_pass_is(s, "Shape") || s->n_in != 1 || s->in[0] < 0 || s->in[0] >= nk ||
            kiln_node_attr(s, "start") || kiln_node_attr(s, "end"))
            continue;
        const kiln_tensor *kv = &known[s->in[0]];
        int64_t k = kiln_get_i64(idx, 0);
        if (kv->ndim < 0 || !kiln_norm_axis(&k, kv->ndim) || kv->dims[k] < 0) continue;
        const int64_t one = 1;
        kiln_tensor *t = kiln_tensor_new(m->ctx, KILN_I64, idx->ndim, &one);
        if (t) kiln_set_i64(t, 0, kv->dims[k]);
        const int c = t ? kiln_pass_add_initializer(m, m->values[g->out[0]].name, t) : -1;
        if (c < 0) {
            st = KILN_ERR_OUT_OF_MEMORY;
            break;
        }
        const int old = m->nodes[i].out[0];
        for (int j = 0; j < nn; j++)
            for (int q = 0; q < m->nodes[j].n_in; q++)
                if (m->nodes[j].in[q] == old) m->nodes[j].in[q] = c;
        *changed = true;
    }
    free(prod);
    return st;
}

kiln_status kiln_pass_channel_gather(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (!kiln_pass_device_has(o, "ChannelGather")) return KILN_OK;
    pctx p = {.m = m, .nk = m->n_values};
    kiln_status st = kiln_pass_known_dims(m, &p.known);
    if (!st) st = fold_shape_gathers(m, p.known, p.nk, changed);
    /* readers that count are live ones: the Shape chains that the channel-shuffle pass leaves
     * of the Reshapes it removed (read by no output) would make a Concat a value to write */
    /* (whatever the dead-nodes switch says: these chains appear after that pass ran) */
    if (!st) st = kiln_pass_sort_nodes(m); /* the sweep walks a topological order */
    if (!st) st = kiln_pass_dead_nodes(m, o, changed);
    if (st) {
        free(p.known);
        return st;
    }
    const int nn = m->n_nodes;
    p.nv = m->n_values;
    int *order = malloc(((size_t)nn + 1) * sizeof *order);
    int *reader_count = calloc((size_t)p.nv + 1, sizeof *reader_count);
    bool *assigned = calloc((size_t)nn + 1, sizeof *assigned), *dead = calloc((size_t)nn + 1, sizeof *dead);
    st = !order || !reader_count || !assigned || !dead
             ? kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "channel-gather: out of memory")
             : KILN_OK;
    if (!st) st = kiln_pass_topo_order(m, order);
    if (!st) st = kiln_pass_value_probes(m, &p.pv);
    for (int i = 0; i < nn && !st; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++)
            if (m->nodes[i].in[k] >= 0) reader_count[m->nodes[i].in[k]]++;
    for (int oi = 0; oi < nn && !st; oi++) {
        const int root = order[oi];
        int64_t a = 0;
        const kiln_node *rn = &m->nodes[root];
        const enum move rmv = assigned[root] ? M_NONE : move_of(&p, rn, &a);
        if (rmv == M_NONE) continue;
        const int x0 = rn->in[0];
        const kiln_dtype dt = m->values[x0].dtype;
        const kiln_format fmt = m->values[x0].format;
        region r = {.n_nodes = 0};
        bool ok = m->values[rn->out[0]].dtype == dt && m->values[rn->out[0]].format == fmt;
        /* the root's inputs and its output's map */
        const int64_t cy = channels(&p, rn->out[0]);
        int64_t *mp = cy > 0 ? malloc((size_t)cy * sizeof *mp) : NULL;
        if (!mp) {
            st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "channel-gather: out of memory");
            break;
        }
        if (rmv == M_CONCAT) {
            int64_t c = 0;
            for (int k = 0; k < rn->n_in && ok; k++) {
                const int v = rn->in[k];
                ok = v >= 0 && m->values[v].dtype == dt && m->values[v].format == fmt;
                r.in[r.n_in] = v;
                for (int64_t q = 0; ok && q < channels(&p, v); q++) mp[c++] = (int64_t)r.n_in * SHIFT + q;
                r.n_in++;
            }
            ok = ok && c == cy;
        } else {
            r.in[r.n_in++] = x0;
            compose(mp, cy, rmv, NULL, channels(&p, x0), a); /* input 0's channels, as numbered */
        }
        r.nodes[r.n_nodes++] = root;
        r.moves = rmv == M_SHUFFLE || rmv == M_SLICE;
        r.vals[r.n_vals] = rn->out[0];
        r.maps[r.n_vals++] = mp;
        /* forward: one-input moves reading a computed value join */
        for (int k = 0; k < r.n_vals && ok; k++) {
            const int v = r.vals[k];
            for (int i = 0; i < nn && ok; i++) {
                const kiln_node *n = &m->nodes[i];
                if (assigned[i] || i == root || n->n_in < 1 || n->in[0] != v) continue;
                bool member = false;
                for (int q = 0; q < r.n_nodes; q++) member |= r.nodes[q] == i;
                if (member) continue;
                bool reads_other = false; /* v at another input too */
                for (int q = 1; q < n->n_in; q++) reads_other |= n->in[q] == v;
                int64_t na = 0;
                const enum move mv = reads_other ? M_NONE : move_of(&p, n, &na);
                if (mv == M_NONE || mv == M_CONCAT || r.n_nodes >= MAXR || m->values[n->out[0]].dtype != dt ||
                    m->values[n->out[0]].format != fmt)
                    continue;
                r.nodes[r.n_nodes++] = i;
                r.moves |= mv == M_SHUFFLE || mv == M_SLICE;
                ok = add_value(&r, n->out[0], channels(&p, n->out[0]), mv, r.maps[k], channels(&p, v), na);
            }
        }
        /* the values written: read by a node outside, or graph outputs */
        int outs[KILN_CHANNEL_GATHER_MAX_IO], n_out = 0;
        int64_t total = 0;
        for (int k = 0; k < r.n_vals && ok; k++) {
            const int v = r.vals[k];
            int inside = 0;
            for (int q = 0; q < r.n_nodes; q++)
                for (int s = 0; s < m->nodes[r.nodes[q]].n_in; s++) inside += m->nodes[r.nodes[q]].in[s] == v;
            if (reader_count[v] == inside && !m->values[v].is_output) continue;
            if (n_out >= KILN_CHANNEL_GATHER_MAX_IO) ok = false;
            else outs[n_out++] = v;
            total += channels(&p, v);
        }
        /* a shuffle or a Slice in it: a Concat and a Pad alone are two vectorized copies that a
         * gather of single elements would not beat */
        ok = ok && r.moves && r.n_nodes >= 2 && total <= KILN_CHANNEL_GATHER_MAX_MAP && n_out > 0;
        if (ok) {
            int64_t *sizes = malloc((size_t)n_out * sizeof *sizes), *map = malloc((size_t)total * sizeof *map);
            if (!sizes || !map) st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "channel-gather: out of memory");
            int64_t e = 0;
            for (int j = 0; j < n_out && !st; j++) {
                sizes[j] = channels(&p, outs[j]);
                memcpy(map + e, map_of(&r, outs[j]), (size_t)sizes[j] * sizeof *map);
                e += sizes[j];
            }
            /* the root becomes the gather (its output list replaced), the others go */
            if (!st) st = kiln_pass_rewrite(m, root, "kiln", "ChannelGather", r.n_in, r.in, NULL);
            for (int j = 0; j < n_out && !st; j++) st = kiln_pass_set_output(m, root, j, outs[j]);
            if (!st) m->nodes[root].n_out = n_out;
            if (!st) st = kiln_node_set_ints(&m->nodes[root], "sizes", n_out, sizes);
            if (!st) st = kiln_node_set_ints(&m->nodes[root], "map", (int)total, map);
            for (int q = 0; q < r.n_nodes; q++) {
                assigned[r.nodes[q]] = true;
                if (q > 0) dead[r.nodes[q]] = true;
            }
            *changed = true;
            free(sizes);
            free(map);
        }
        region_free(&r);
    }
    if (!st && *changed) {
        kiln_pass_remove_nodes(m, dead);
        st = kiln_pass_sort_nodes(m);
    }
    kiln_pass_value_probes_free(&p.pv);
    free(p.known);
    free(order);
    free(reader_count);
    free(assigned);
    free(dead);
    return st;
}
