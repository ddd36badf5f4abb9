/*
 * channel_shuffle.c — ShuffleNet's channel shuffle as one kiln.ChannelShuffle node (run by
 * the layout pass, before it lays values out, for device plans).
 *
 * PyTorch writes channel_shuffle(x, g) as x.view(N, g, C/g, H, W).transpose(1, 2)
 * .contiguous().view(N, C, H, W): Reshape - Transpose (0, 2, 1, 3, 4) - Reshape. As such,
 * in an NHWC chain, it costs a conversion to NCHW, a 5-D Transpose and a conversion back;
 * as kiln.ChannelShuffle (src/ops/channel_shuffle.c) it is one gather that reads either
 * layout, so the layout pass keeps the chain NHWC through it.
 *
 * Matched: Reshape(X, s1) -> Transpose(perm = (0, 2, 1, 3, 4)) -> Reshape(., s2), where X
 * is 4-D (N, C, H, W), the first Reshape gives (N, g, C/g, H, W) and the second X's shape,
 * in both shape probes (symbolic dims as 1 and as 3: the shapes may be computed from
 * Shape(X) at run time, as the exporter writes them for a symbolic batch), and the two
 * intermediate values have no other reader and are no graph outputs. The second Reshape
 * becomes kiln.ChannelShuffle(X, groups = g) with its output; the first Reshape and the
 * Transpose go (the shape computations they read, if nothing else reads them, are left
 * for the planner's folding). The backward of such a shuffle (in a training graph) is the
 * same chain with C/g groups and is matched too.
 */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

/* Dims of value v in probe t equal to want (rank nd). */
static bool dims_are(const kiln_tensor *t, int nd, const int64_t *want) {
    if (t->ndim != nd) return false;
    for (int d = 0; d < nd; d++)
        if (t->dims[d] != want[d]) return false;
    return true;
}

/* The groups of a Reshape-Transpose-Reshape channel shuffle of x through r1 (the first
 * Reshape's output) to y, in one probe's shapes; 0 when it is not one. */
static int64_t shuffle_groups(const kiln_tensor *vt, int x, int r1, int y) {
    const kiln_tensor *a = &vt[x], *b = &vt[r1];
    if (a->ndim != 4 || b->ndim != 5 || b->dims[0] != a->dims[0] || b->dims[3] != a->dims[2] ||
        b->dims[4] != a->dims[3] || b->dims[1] < 1 || b->dims[1] * b->dims[2] != a->dims[1])
        return 0;
    return dims_are(&vt[y], 4, a->dims) ? b->dims[1] : 0;
}

static bool perm_0_2_1_3_4(const kiln_node *t) {
    int np = 0;
    const int64_t *p = kiln_attr_ints(t, "perm", &np);
    static const int64_t want[5] = {0, 2, 1, 3, 4};
    if (!p || np != 5) return false;
    for (int d = 0; d < 5; d++)
        if (p[d] != want[d]) return false;
    return true;
}

kiln_status kiln_pass_channel_shuffle(kiln_model *m, bool *changed) {
    const int nn = m->n_nodes;
    bool any = false;
    for (int i = 0; i < nn && !any; i++) any = kiln_pass_is(&m->nodes[i], "Transpose") && perm_0_2_1_3_4(&m->nodes[i]);
    if (!any) return KILN_OK;
    kiln_shape_probes pr;
    kiln_status st = kiln_pass_shape_probes(m, &pr);
    if (st) return st;
    int *prod = kiln_pass_producers(m);
    bool *dead = calloc((size_t)nn + 1, sizeof *dead);
    if (!prod || !dead) st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    for (int i = 0; i < nn && !st; i++) {
        const kiln_node *t = &m->nodes[i];
        if (!kiln_pass_is(t, "Transpose") || t->n_in != 1 || t->n_out != 1 || !perm_0_2_1_3_4(t)) continue;
        const int r1 = t->in[0], tr = t->out[0];
        if (r1 < 0 || tr < 0 || prod[r1] < 0) continue;
        const int p1 = prod[r1], p2 = kiln_pass_single_consumer(m, tr);
        if (dead[p1] || p2 < 0 || dead[p2] || kiln_pass_single_consumer(m, r1) != i) continue;
        const kiln_node *a = &m->nodes[p1], *b = &m->nodes[p2];
        /* op-pattern: Reshape -> Transpose -> Reshape */
        if (!kiln_pass_is(a, "Reshape") || !kiln_pass_is(b, "Reshape") || a->n_out != 1 || b->n_out != 1 ||
            a->n_in < 1 || a->in[0] < 0 || b->in[0] != tr || b->out[0] < 0)
            continue;
        const int x = a->in[0], y = b->out[0];
        if (x >= pr.n || r1 >= pr.n || y >= pr.n) continue;
        const int64_t g = shuffle_groups(pr.one, x, r1, y);
        if (g <= 0 || shuffle_groups(pr.three, x, r1, y) != g) continue;
        st = kiln_pass_rewrite(m, p2, "kiln", "ChannelShuffle", 1, &x, NULL);
        if (!st) st = kiln_pass_set_int(m, p2, "groups", g);
        dead[p1] = dead[i] = true;
        *changed = true;
    }
    if (!st) kiln_pass_remove_nodes(m, dead);
    kiln_pass_shape_probes_free(&pr);
    free(prod);
    free(dead);
    return st;
}
