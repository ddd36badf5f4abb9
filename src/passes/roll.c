/*
 * roll.c — torch.roll as one kiln.Roll node (run by the layout pass, before it lays values
 * out, for device plans, as the channel shuffle is).
 *
 * torch.onnx writes torch.roll(x, s, dim=a) as Concat(Slice(x, -s, INT_MAX, a), Slice(x, 0,
 * -s, a); axis a): two copies into pieces and a third into the joined tensor. Swin's
 * shifted windows (v1 and v2) roll each shifted block's input by -w/2 on H and W and its
 * output back by +w/2: four such rolls a block, each moving the whole activation three
 * times. As kiln.Roll (src/ops/roll.c) a roll is one gather, and rolls of one tensor along
 * different axes in a row are merged into one node: one read and one write of the tensor
 * where there were six.
 *
 * Matched: Concat (2 inputs) along axis a of Slice(x, b, END, a) and Slice(x, 0, b, a), the
 * same x, steps 1, b a constant with 0 < |b| < x's size on a and END at or past the end, in
 * both shape probes (symbolic dims as 1 and as 3); the Slices' outputs read by nothing else.
 * The Concat becomes kiln.Roll(x; axes = [a], shifts = [-b]) with its output; the Slices go.
 * Then a kiln.Roll whose input is the only reader of another kiln.Roll's output, on other
 * axes, takes that one's input and axes (the first goes).
 */
#include "passes.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The one axis, start and end of a Slice node with step 1 (constants; the opset < 10
 * attribute form too); false for anything else. */
static bool slice_1d(const kiln_model *m, const int *prod, const kiln_node *n, int64_t *axis, int64_t *start,
                     int64_t *end) {
    int64_t v[3];
    if (n->opset < 10) {
        int ns = 0, ne = 0, na = 0;
        const int64_t *a = kiln_attr_ints(n, "starts", &ns), *b = kiln_attr_ints(n, "ends", &ne),
                      *c = kiln_attr_ints(n, "axes", &na);
        if (!a || !b || ns != 1 || ne != 1 || (c && na != 1)) return false;
        *start = a[0];
        *end = b[0];
        *axis = c ? c[0] : 0;
        return true;
    }
    for (int k = 1; k <= 4; k++) {
        const int in = kiln_pass_opt_in(n, k);
        if (in < 0) {
            if (k <= 2) return false;
            if (k == 3) v[2] = 0;
            continue;
        }
        const kiln_tensor *t = kiln_pass_constant(m, prod, in);
        if (!t || !kiln_dtype_is_int(t->dtype) || kiln_tensor_numel(t) != 1) return false;
        const int64_t x = kiln_get_i64(t, 0);
        if (k == 4) {
            if (x != 1) return false;
        } else {
            v[k - 1] = x;
        }
    }
    *start = v[0];
    *end = v[1];
    *axis = v[2];
    return true;
}

/* Slice(x, b0, e0) and Slice(x, b1, e1) on `axis` joined are a roll of x in one probe's
 * shapes vt: [b0, n) then [0, b0) with 0 < |b0| < n (ends clamped as ONNX does). */
static bool roll_in_probe(const kiln_tensor *vt, int x, int64_t axis, int64_t b0, int64_t e0, int64_t b1, int64_t e1) {
    const kiln_tensor *t = &vt[x];
    if (t->ndim < 1 || axis < 0 || axis >= t->ndim) return false;
    const int64_t n = t->dims[axis];
    if (n < 2) return false;
    int64_t s0 = b0 < 0 ? b0 + n : b0, f0 = e0 < 0 ? e0 + n : e0, s1 = b1 < 0 ? b1 + n : b1, f1 = e1 < 0 ? e1 + n : e1;
    f0 = f0 > n ? n : f0;
    f1 = f1 > n ? n : f1;
    return s0 > 0 && s0 < n && f0 == n && s1 == 0 && f1 == s0 && (b0 < 0 ? -b0 : b0) < n;
}

static kiln_status make_roll(kiln_model *m, int node, int x, int na, int64_t *axes, int64_t *shifts) {
    kiln_attr attrs[2];
    memset(attrs, 0, sizeof attrs);
    attrs[0].name = (char *)"axes";
    attrs[0].type = KILN_ATTR_INTS;
    attrs[0].n = na;
    attrs[0].ints = axes;
    attrs[1].name = (char *)"shifts";
    attrs[1].type = KILN_ATTR_INTS;
    attrs[1].n = na;
    attrs[1].ints = shifts;
    kiln_node src;
    memset(&src, 0, sizeof src);
    src.n_attrs = 2;
    src.attrs = attrs;
    return kiln_pass_rewrite(m, node, "kiln", "Roll", 1, &x, &src);
}

kiln_status kiln_pass_roll(kiln_model *m, bool *changed) {
    const int nn = m->n_nodes;
    bool any = false;
    for (int i = 0; i < nn && !any; i++) any = kiln_pass_is(&m->nodes[i], "Concat") && m->nodes[i].n_in == 2;
    if (!any) return KILN_OK;
    kiln_shape_probes pr;
    kiln_status st = kiln_pass_shape_probes(m, &pr);
    if (st) return st;
    int *prod = kiln_pass_producers(m);
    bool *dead = calloc((size_t)nn + 1, sizeof *dead);
    if (!prod || !dead) st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    bool made = false;
    for (int i = 0; i < nn && !st; i++) {
        const kiln_node *c = &m->nodes[i];
        /* op-pattern: Concat(Slice(x, b, END), Slice(x, 0, b)) on the slices' axis (torch.roll) */
        if (!kiln_pass_is(c, "Concat") || c->n_in != 2 || c->n_out != 1 || c->out[0] < 0 || c->in[0] < 0 ||
            c->in[1] < 0 || c->in[0] == c->in[1])
            continue;
        const int p0 = prod[c->in[0]], p1 = prod[c->in[1]];
        if (p0 < 0 || p1 < 0 || dead[p0] || dead[p1] || kiln_pass_single_consumer(m, c->in[0]) != i ||
            kiln_pass_single_consumer(m, c->in[1]) != i)
            continue;
        const kiln_node *s0 = &m->nodes[p0], *s1 = &m->nodes[p1];
        /* op-pattern: both of the Concat's inputs Slices of one x */
        if (!kiln_pass_is(s0, "Slice") || !kiln_pass_is(s1, "Slice") || s0->n_in < 1 || s1->n_in < 1 ||
            s0->in[0] < 0 || s0->in[0] != s1->in[0] || s0->n_out != 1 || s1->n_out != 1)
            continue;
        const int x = s0->in[0];
        if (x >= pr.n || c->out[0] >= pr.n) continue;
        int64_t a0, b0, e0, a1, b1, e1;
        if (!slice_1d(m, prod, s0, &a0, &b0, &e0) || !slice_1d(m, prod, s1, &a1, &b1, &e1)) continue;
        const int rank = pr.one[x].ndim;
        int64_t ax = kiln_attr_int(c, "axis", c->opset < 4 ? 1 : 0);
        if (rank < 1 || pr.three[x].ndim != rank || !kiln_norm_axis(&ax, rank) || !kiln_norm_axis(&a0, rank) ||
            !kiln_norm_axis(&a1, rank) || a0 != ax || a1 != ax)
            continue;
        if (!roll_in_probe(pr.one, x, ax, b0, e0, b1, e1) || !roll_in_probe(pr.three, x, ax, b0, e0, b1, e1) ||
            !kiln_pass_same_shape(&pr, x, c->out[0]))
            continue;
        int64_t axes[1] = {ax}, shifts[1] = {-b0};
        st = make_roll(m, i, x, 1, axes, shifts);
        dead[p0] = dead[p1] = true;
        made = true;
    }
    if (!st && made) {
        /* rolls of one tensor on other axes in a row: one node (the Slices gone first, so
         * that a roll's output has the next roll as its one reader) */
        kiln_pass_remove_nodes(m, dead);
        *changed = true;
        free(prod);
        free(dead);
        prod = kiln_pass_producers(m);
        dead = calloc((size_t)m->n_nodes + 1, sizeof *dead);
        if (!prod || !dead) st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        for (int i = 0; i < m->n_nodes && !st; i++) {
            const kiln_node *r2 = &m->nodes[i];
            if (dead[i] || !kiln_pass_is_kiln(r2, "Roll") || r2->in[0] < 0) continue;
            const int p = prod[r2->in[0]];
            if (p < 0 || dead[p] || !kiln_pass_is_kiln(&m->nodes[p], "Roll") ||
                kiln_pass_single_consumer(m, r2->in[0]) != i)
                continue;
            const kiln_node *r1 = &m->nodes[p];
            int n1 = 0, n2 = 0, m1 = 0, m2 = 0;
            const int64_t *ax1 = kiln_attr_ints(r1, "axes", &n1), *sh1 = kiln_attr_ints(r1, "shifts", &m1),
                          *ax2 = kiln_attr_ints(r2, "axes", &n2), *sh2 = kiln_attr_ints(r2, "shifts", &m2);
            if (!ax1 || !ax2 || !sh1 || !sh2 || n1 != m1 || n2 != m2 || n1 + n2 > KILN_MAX_DIMS) continue;
            int64_t axes[KILN_MAX_DIMS], shifts[KILN_MAX_DIMS];
            bool overlap = false;
            for (int a = 0; a < n1; a++)
                for (int b = 0; b < n2; b++) overlap = overlap || ax1[a] == ax2[b];
            if (overlap) continue;
            memcpy(axes, ax1, (size_t)n1 * sizeof *axes);
            memcpy(shifts, sh1, (size_t)n1 * sizeof *shifts);
            memcpy(axes + n1, ax2, (size_t)n2 * sizeof *axes);
            memcpy(shifts + n1, sh2, (size_t)n2 * sizeof *shifts);
            const int x = r1->in[0];
            st = make_roll(m, i, x, n1 + n2, axes, shifts);
            dead[p] = true;
        }
    }
    if (!st && made) kiln_pass_remove_nodes(m, dead);
    kiln_pass_shape_probes_free(&pr);
    free(prod);
    free(dead);
    return st;
}
