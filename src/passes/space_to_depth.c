/*
 * space_to_depth.c — a Concat of strided Slices that tile one tensor as one Transpose
 * (KILN_PASS_SPACE_TO_DEPTH).
 *
 * Swin's patch merging (torchvision's _patch_merging_pad: x[..., 0::2, 0::2, :],
 * x[..., 1::2, 0::2, :], x[..., 0::2, 1::2, :], x[..., 1::2, 1::2, :] concatenated on the
 * channels) and YOLOv5's Focus (the same on NCHW, concatenated on axis 1) are exported as
 * Slices with a step on the map's axes and a Concat: six copies of the map's parts and one of
 * the whole (Swin-V2-S at batch 256 on an H200: 0.75 ms over its three merges). The
 * concatenation is a space-to-depth: with X (.., H, .., W, ..) read as (.., H/s, s, .., W/t,
 * t, ..), input p of the Concat holds the elements at offsets (a, b) with p = the offsets'
 * mixed-radix number in some order of the sliced axes. So
 *
 *   X -Reshape-> each sliced axis split (n, s) -Transpose-> the s factors, in the radix's
 *   order (slowest first), moved just before the Concat's axis -Reshape-> the Concat's shape
 *
 * is the same function: one copy (a Transpose the backends' kernels move in 16-byte pieces
 * when the innermost axis stays), which the layout pass can also lay out.
 *
 * Matched: Concat(axis k) whose every input is a chain of at most 4 Slices (constant starts,
 * ends, axes, steps) back to one X; on each sliced axis a step s >= 2, a start in [0, s), the
 * end at or past the axis's end, and the axis's length a multiple of s (in both shape probes);
 * the same axes and steps in every chain, the Concat's axis never sliced, every offset tuple
 * once; X's dims from the first sliced or concatenated axis on the same in both probes (the
 * Reshapes copy the leading ones with 0). Every Slice of the chains is read only by the
 * chains (shared prefixes allowed: x[0::2] feeds two of Swin's four) and is no graph output.
 */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CHAIN 4  /* Slices per input */
#define MAX_AXES 4   /* sliced axes */
#define MAX_INPUTS 64

/* Entry i of a 1-D integer constant of n entries. */
static int64_t ival(const kiln_tensor *t, int64_t i) {
    return t->dtype == KILN_I32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

static bool int_vector(const kiln_tensor *t, int64_t n) {
    return t && (t->dtype == KILN_I64 || t->dtype == KILN_I32) && t->ndim == 1 && t->dims[0] == n;
}

/* What one chain of Slices takes: per axis of X, the step (0: not sliced) and the start. */
typedef struct {
    int64_t step[KILN_MAX_DIMS], start[KILN_MAX_DIMS];
} take;

/* Slice node s (input dims d, rank nd) as a strided take added to t; false when it is not
 * one (a non-constant parameter, a step < 2 on an axis it cuts, an end short of the axis's
 * end, a start past the step, a length not a multiple of the step, an axis cut twice). */
static bool slice_take(const kiln_model *m, const int *prod, const kiln_node *s, const int64_t *d, int nd, take *t) {
    if (s->n_in < 3 || s->n_out != 1 || s->out[0] < 0) return false;
    const kiln_tensor *st = kiln_pass_constant_through(m, prod, s->in[1]);
    if (!st || st->ndim != 1) return false;
    const int64_t n = st->dims[0];
    const kiln_tensor *en = kiln_pass_constant_through(m, prod, s->in[2]);
    const int ia = kiln_pass_opt_in(s, 3), is = kiln_pass_opt_in(s, 4);
    const kiln_tensor *ax = ia >= 0 ? kiln_pass_constant_through(m, prod, ia) : NULL;
    const kiln_tensor *sp = is >= 0 ? kiln_pass_constant_through(m, prod, is) : NULL;
    if (n < 1 || n > nd || !int_vector(st, n) || !int_vector(en, n) || (ia >= 0 && !int_vector(ax, n)) ||
        (is >= 0 && !int_vector(sp, n)))
        return false;
    for (int64_t i = 0; i < n; i++) {
        int64_t a = ax ? ival(ax, i) : i;
        if (a < 0) a += nd;
        const int64_t step = sp ? ival(sp, i) : 1, len = d[a];
        int64_t b = ival(st, i), e = ival(en, i);
        if (a < 0 || a >= nd || step < 2 || t->step[a] || len < step || len % step) return false;
        if (b < 0) b += len;
        if (e < 0) e += len;
        if (b < 0 || b >= step || e < len) return false;
        t->step[a] = step;
        t->start[a] = b;
    }
    return true;
}

/* Concat node i as a space-to-depth Transpose (see the top); *done when rewritten. */
static kiln_status merge(kiln_model *m, const kiln_shape_probes *pr, int i, bool *dead, bool *done) {
    *done = false;
    const kiln_node *c = &m->nodes[i];
    const int P = c->n_in, y = c->n_out == 1 ? c->out[0] : -1;
    if (P < 2 || P > MAX_INPUTS || y < 0 || y >= pr->n) return KILN_OK;
    int *prod = kiln_pass_producers(m);
    if (!prod) return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = KILN_OK;
    int x = -1, nd = 0, n_sl = 0, sl[MAX_INPUTS * MAX_CHAIN];
    int64_t xd[KILN_MAX_DIMS];
    take tk[MAX_INPUTS];
    bool ok = true;
    /* each input back through its Slices to X */
    for (int p = 0; p < P && ok; p++) {
        memset(&tk[p], 0, sizeof tk[p]);
        int v = c->in[p], hops = 0;
        int chain[MAX_CHAIN];
        while (ok && v >= 0 && v < pr->n && prod[v] >= 0 && kiln_pass_is(&m->nodes[prod[v]], "Slice")) {
            if (hops == MAX_CHAIN) ok = false;
            else {
                chain[hops++] = prod[v];
                v = m->nodes[prod[v]].in[0];
            }
        }
        if (!ok || hops == 0 || v < 0 || v >= pr->n || (x >= 0 && v != x)) {
            ok = false;
            break;
        }
        x = v;
        nd = pr->one[x].ndim;
        if (nd < 1 || nd > KILN_MAX_DIMS || pr->three[x].ndim != nd) {
            ok = false;
            break;
        }
        for (int h = hops - 1; h >= 0 && ok; h--) { /* X's end first: the dims each Slice reads */
            const kiln_node *s = &m->nodes[chain[h]];
            ok = s->in[0] >= 0 && s->in[0] < pr->n;
            for (int q = 0; q < 2 && ok; q++) {
                const kiln_tensor *ti = q ? &pr->three[s->in[0]] : &pr->one[s->in[0]];
                take t = tk[p];
                ok = ti->ndim == nd && slice_take(m, prod, s, ti->dims, nd, &t);
                if (ok && q) tk[p] = t;
            }
            bool seen = false;
            for (int k = 0; k < n_sl; k++) seen = seen || sl[k] == chain[h];
            if (ok && !seen) sl[n_sl++] = chain[h];
        }
    }
    int64_t axis = kiln_attr_int(c, "axis", 0);
    if (ok && axis < 0) axis += nd;
    ok = ok && nd >= 1 && nd <= KILN_MAX_DIMS && axis >= 0 && axis < nd && !tk[0].step[axis];
    /* the same axes and steps in every chain, every offset tuple once */
    int A[MAX_AXES], m_ax = 0;
    int64_t combos = 1;
    for (int a = 0; ok && a < nd; a++)
        if (tk[0].step[a]) {
            ok = m_ax < MAX_AXES;
            if (ok) A[m_ax++] = a;
            combos *= tk[0].step[a];
        }
    for (int p = 1; ok && p < P; p++)
        for (int a = 0; ok && a < nd; a++) ok = tk[p].step[a] == tk[0].step[a];
    ok = ok && m_ax >= 1 && combos == P && nd + m_ax <= KILN_MAX_DIMS;
    /* the radix order (slowest first) that numbers the inputs: the first of the m! orders */
    int ord[MAX_AXES];
    bool found = false;
    if (ok) {
        int perm[MAX_AXES];
        for (int k = 0; k < m_ax; k++) perm[k] = k;
        for (;;) {
            bool all = true;
            for (int p = 0; p < P && all; p++) {
                int64_t num = 0;
                for (int k = 0; k < m_ax; k++) num = num * tk[0].step[A[perm[k]]] + tk[p].start[A[perm[k]]];
                all = num == p;
            }
            if (all) {
                for (int k = 0; k < m_ax; k++) ord[k] = A[perm[k]];
                found = true;
                break;
            }
            int j = m_ax - 2; /* the next permutation (lexicographic) */
            while (j >= 0 && perm[j] > perm[j + 1]) j--;
            if (j < 0) break;
            int l = m_ax - 1;
            while (perm[l] < perm[j]) l--;
            int tmp = perm[j];
            perm[j] = perm[l];
            perm[l] = tmp;
            for (int a = j + 1, b = m_ax - 1; a < b; a++, b--) {
                tmp = perm[a];
                perm[a] = perm[b];
                perm[b] = tmp;
            }
        }
    }
    ok = ok && found;
    /* X's dims from the first sliced or concatenated axis on, the same in both probes */
    int first = (int)axis;
    for (int k = 0; ok && k < m_ax; k++) first = A[k] < first ? A[k] : first;
    for (int d = 0; ok && d < nd; d++) {
        xd[d] = pr->three[x].dims[d];
        ok = d < first || pr->one[x].dims[d] == xd[d];
    }
    /* every Slice read only inside the chains, none a graph output */
    for (int k = 0; ok && k < n_sl; k++) {
        const int v = m->nodes[sl[k]].out[0];
        for (int g = 0; ok && g < m->n_outputs; g++) ok = m->outputs[g] != v;
        for (int n = 0; ok && n < m->n_nodes; n++) {
            const kiln_node *r = &m->nodes[n];
            bool reads = false;
            for (int q = 0; q < r->n_in; q++) reads = reads || r->in[q] == v;
            if (!reads || n == i) continue;
            bool inside = false;
            for (int j = 0; j < n_sl; j++) inside = inside || sl[j] == n;
            ok = inside && r->in[0] == v; /* as the data of a Slice of the chains */
            for (int q = 1; ok && q < r->n_in; q++) ok = r->in[q] != v;
        }
        ok = ok && !dead[sl[k]];
    }
    if (!ok) goto out;
    {
        /* shape 1: X with each sliced axis split (n, s); 0 copies the leading dims */
        int64_t s1[2 * KILN_MAX_DIMS], s2[KILN_MAX_DIMS];
        int pos_n[KILN_MAX_DIMS] = {0}, pos_s[KILN_MAX_DIMS] = {0}, r1 = 0;
        for (int d = 0; d < nd; d++) {
            const int64_t s = tk[0].step[d];
            pos_n[d] = r1;
            s1[r1++] = d < first ? 0 : s ? xd[d] / s : xd[d];
            if (s) {
                pos_s[d] = r1;
                s1[r1++] = s;
            }
        }
        /* the Transpose: X's axes in order (the n factors in the sliced axes' places), the s
         * factors (slowest first) just before the Concat's axis */
        char perm[256];
        int len = snprintf(perm, sizeof perm, "perm=[");
        int outn = 0;
        for (int d = 0; d < nd; d++) {
            if (d == axis)
                for (int k = 0; k < m_ax; k++)
                    len += snprintf(perm + len, sizeof perm - (size_t)len, "%s%d", outn++ ? "," : "", pos_s[ord[k]]);
            len += snprintf(perm + len, sizeof perm - (size_t)len, "%s%d", outn++ ? "," : "", pos_n[d]);
        }
        snprintf(perm + len, sizeof perm - (size_t)len, "]");
        /* shape 2: the Concat's (the axis times P, the sliced axes divided) */
        for (int d = 0; d < nd; d++) {
            const int64_t s = tk[0].step[d];
            s2[d] = d < first ? 0 : d == axis ? xd[d] * P : s ? xd[d] / s : xd[d];
        }
        char name[256];
        snprintf(name, sizeof name, "%.180s/space_to_depth", c->name ? c->name : "concat");
        const int sh1 = kiln_pass_add_i64s(m, name, r1, s1), sh2 = sh1 >= 0 ? kiln_pass_add_i64s(m, name, nd, s2) : -1;
        const int v1 = sh2 >= 0 ? kiln_pass_new_value(m, name) : -1, v2 = v1 >= 0 ? kiln_pass_new_value(m, name) : -1;
        if (v2 < 0) {
            st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
            goto out;
        }
        const kiln_dtype dt = m->values[y].dtype ? m->values[y].dtype : pr->one[y].dtype;
        m->values[v1].dtype = dt;
        m->values[v2].dtype = dt;
        /* op-pattern: Slice -> Concat as Reshape, Transpose, Reshape */
        int r = kiln_pass_append_node(m, "Reshape", name, 2, (int[]){x, sh1}, v1, NULL, 14);
        r = r >= 0 ? kiln_pass_append_node(m, "Transpose", name, 1, &v1, v2, perm, 13) : -1;
        r = r >= 0 ? kiln_pass_append_node(m, "Reshape", name, 2, (int[]){v2, sh2}, y, NULL, 14) : -1;
        if (r < 0) {
            st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a node");
            goto out;
        }
        m->nodes[i].out[0] = -1; /* the Concat goes; the last Reshape writes its output */
        dead[i] = true;
        for (int k = 0; k < n_sl; k++) dead[sl[k]] = true;
        *done = true;
    }
out:
    free(prod);
    return st;
}

kiln_status kiln_pass_space_to_depth(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    (void)o;
    return kiln_pass_each_node(m, "Concat", merge, changed); /* op-pattern */
}
