/* fuse_bn.c — a training BatchNormalization and the Relu after it as one node each way
 * (KILN_PASS_FUSE_BN; the attribute relu of src/ops/batch_normalization.c):
 *
 *   forward   y0 = BatchNormalization(x, scale, B, mean, var) training_mode=1
 *             y = Relu(y0)
 *          -> y = BatchNormalization(x, scale, B, mean, var) training_mode=1, relu=1
 *             (running_mean / running_var outputs kept)
 *   forward, the residual (ResNet's block end)
 *             y0 = BatchNormalization(x, scale, B, mean, var) training_mode=1
 *             s = Add(y0, z)  (or Add(z, y0))
 *             y = Relu(s)
 *          -> y = BatchNormalization(x, scale, B, mean, var, z) training_mode=1, relu=1
 *             (the backward is left as it is: the Relu's gradient still reads y, and feeds
 *             both the BN's gradient and z's)
 *   backward  (what autograd emits for a Relu whose gradient feeds a BatchNormalization's)
 *             g0 = kiln.UnaryGrad(g, -, y) op=Relu
 *             dx, dscale, dB = kiln.BatchNormGrad(g0, x, scale, B, mean, var)
 *          -> dx, dscale, dB = kiln.BatchNormGrad(g, x, scale, B, mean, var, y) relu=1
 *   backward, the mask from X (unless KILN_PASS_BN_MASK_FROM_X is disabled or
 *   KILN_BN_MASK_FROM_X=0 is set), where y is a fused BN's (the form above
 *   otherwise; never the residual forms below, which keep y)
 *             y = BatchNormalization(x, scale, B, mean, var) training_mode=1, relu=1
 *             g0 = kiln.UnaryGrad(g, -, y) op=Relu
 *             dx, dscale, dB = kiln.BatchNormGrad(g0, x, scale, B, mean, var)
 *          -> y, ..., s = BatchNormalization(x, scale, B, mean, var) training_mode=1, relu=1
 *             dx, dscale, dB = kiln.BatchNormGrad(g, x, scale, B, mean, var, s) relu=1,
 *                              relu_mask_from_x=1
 *             (s: the forward's saved statistics, its output 3, (2, C) f64; the mask is the
 *             forward's y > 0 recomputed from x, bit for bit: the gradient reads no y).
 *             Not where g is a two-input Sum read only there: the Sum fold below takes it
 *             (input 7; 7 passes where the Sum and the mask from X would be 3 + 5).
 *   backward, the residual (the Relu's gradient also read by the shortcut's gradient)
 *             g0 = kiln.UnaryGrad(g, -, y) op=Relu          (g0 read by others too)
 *             dx, dscale, dB = kiln.BatchNormGrad(g0, x, scale, B, mean, var)
 *          -> dx, dscale, dB, -, -, g0 = kiln.BatchNormGrad(g, x, scale, B, mean, var, y) relu=1
 *             (output 5: the gradient it reads, masked, written once for the shortcut)
 *   backward, a gradient summed from two (a block's input: conv branch + shortcut)
 *             g = Sum(a, b)
 *             ... = kiln.BatchNormGrad(g, x, ...)
 *          -> ... = kiln.BatchNormGrad(a, x, ..., b)  (input 7: added before the mask)
 *
 * Why: in ResNet-50's CUDA training step the Relu after each BatchNormalization and its
 * gradient are a read and a write of the largest activations each (issue 12, bench/NOTES.md
 * "t2": Relu 2.6 ms, UnaryGrad 3.7 ms of a 51 ms step); fused they cost nothing beyond the
 * BN kernels' own passes (src/cuda/norm_train.cu).
 *
 * When: the forward, a BatchNormalization in training mode (opset >= 14, training_mode 1)
 * without relu, whose Y is read by nothing but one Relu (and is no graph output), Y and
 * the Relu's output in one layout. The BN node takes the Relu's output; the Relu
 * goes. The residual form likewise with y0 read only by an Add whose output only one Relu
 * reads, z of y0's shape whatever the batch (the shape probes) and dtype, every value in
 * one layout; the Add goes too. Its sum is rounded once instead of twice (FUSED.md's
 * contract), so that graph computes the same function within f16/f32 rounding, not bit
 * for bit. The backward, independently (the identity holds whatever Y is): a kiln.UnaryGrad
 * op=Relu on (g, absent, y) whose output only a kiln.BatchNormGrad without relu reads, as
 * its dY (input 0, no other input), g, y and dY in one layout. The BatchNormGrad node
 * reads g and y (input 6) with relu = 1; the UnaryGrad goes. Only on devices with
 * kiln.BatchNormGrad's kernel (whose kernels take relu; the CPU's and CUDA's). Runs after
 * the layout pass (formats final). The nodes are left in a topological order.
 *
 * The residual forms (issue 12, bench/NOTES.md "t4"): in ResNet-50's step the 16 residual
 * ReLU gradients (2.1 ms) and the 16 Sums at the blocks' inputs (2.0 ms) each read and write
 * a block's largest activations. The same UnaryGrad, read by a kiln.BatchNormGrad without
 * relu (as its dY, input 0, and nothing else) and by other nodes: the BatchNormGrad takes g
 * and y with relu = 1 and computes g0 as its output 5 (the UnaryGrad goes; its readers read
 * that). Then (the UnaryGrads gone) a two-input Sum whose output only a kiln.BatchNormGrad
 * reads, as its dY and nothing else, with no input 7 yet: the BatchNormGrad reads a as dY
 * and b as input 7 (the Sum goes); a, b and the sum of one shape whatever the batch (the
 * shape probes), dtype and layout. The sum is rounded once where Sum rounds it before
 * BatchNormGrad reads it (FUSED.md's contract); output 5 is the rounded masked sum as the
 * UnaryGrad wrote it. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kiln_format fmt(const kiln_model *m, int v) { return m->values[v].format; }

/* The mask from X (issue 12, bench/NOTES.md "t7"): on unless KILN_PASS_BN_MASK_FROM_X is
 * disabled or KILN_BN_MASK_FROM_X=0 */
static bool mask_from_x_on(const kiln_pass_options *o) {
    const char *e = getenv("KILN_BN_MASK_FROM_X");
    return !(o->disabled & KILN_PASS_BN_MASK_FROM_X) && !(e && strcmp(e, "0") == 0);
}

/* The fused training BatchNormalization (relu = 1, no residual) writing y whose gradient d
 * is (same X, scale, B and epsilon), or -1 */
static int fused_bn_of(const kiln_model *m, int y, const kiln_node *d) {
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        /* op-pattern: BatchNormalization -> (its Relu's gradient) -> BatchNormGrad */
        if (!kiln_pass_is(n, "BatchNormalization") || n->n_out < 1 || n->out[0] != y) continue;
        const bool ok = n->opset >= 14 && kiln_attr_int(n, "training_mode", 0) != 0 && kiln_attr_int(n, "relu", 0) == 1 &&
                        n->n_in == 5 && n->n_out <= 4 &&
                        n->in[0] == d->in[1] && n->in[1] == d->in[2] && n->in[2] == d->in[3] &&
                        kiln_attr_float(n, "epsilon", 1e-5f) == kiln_attr_float(d, "epsilon", 1e-5f) &&
                        kiln_attr_int(n, "sync_comm", 0) == kiln_attr_int(d, "sync_comm", 0);
        return ok ? i : -1;
    }
    return -1;
}

/* g is a two-input Sum's output read by one node: the Sum fold below will take it into the
 * BatchNormGrad as input 7 (a residual form, which keeps Y: X, dY, dY2, Y read once, the
 * gradient written and read, X read, dX written, 7 passes; the Sum then the mask from X
 * would be 3 + 5) */
static bool sum_folds(const kiln_model *m, int g) {
    /* op-pattern: Sum -> BatchNormGrad */
    for (int i = 0; i < m->n_nodes; i++)
        if (kiln_pass_is(&m->nodes[i], "Sum") && m->nodes[i].n_out == 1 && m->nodes[i].out[0] == g)
            return m->nodes[i].n_in == 2 && kiln_pass_uses(m, g) == 1;
    return false;
}

static bool training_bn(const kiln_node *n) {
    return kiln_pass_is(n, "BatchNormalization") && n->opset >= 14 && kiln_attr_int(n, "training_mode", 0) != 0 &&
           kiln_attr_int(n, "relu", 0) == 0 && n->n_in == 5 && n->n_out >= 1 && n->out[0] >= 0;
}

kiln_status kiln_pass_fuse_bn(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    if (!kiln_pass_device_has(o, "BatchNormGrad")) return KILN_OK;
    bool any = false;
    for (int i = 0; i < m->n_nodes && !any; i++) any = kiln_pass_is(&m->nodes[i], "BatchNormalization");
    if (!any) return KILN_OK;
    bool *dead = kiln_calloc(m->ctx, (size_t)m->n_nodes + 1, sizeof *dead, "a pass");
    if (!dead) return KILN_ERR_OUT_OF_MEMORY;
    kiln_status st = KILN_OK;
    kiln_shape_probes sp = {0};
    bool probed = false; /* taken before the graph changes, when a training BN feeds an Add */
    bool sums = false, grads = false; /* or a Sum may be folded into a BatchNormGrad */
    for (int i = 0; i < m->n_nodes; i++) {
        /* op-pattern: Sum -> BatchNormGrad */
        sums |= kiln_pass_is(&m->nodes[i], "Sum") && m->nodes[i].n_in == 2;
        grads |= kiln_pass_is_kiln(&m->nodes[i], "BatchNormGrad");
    }
    for (int bi = 0; bi < m->n_nodes && !probed && !st; bi++) {
        const int a = training_bn(&m->nodes[bi]) ? kiln_pass_single_consumer(m, m->nodes[bi].out[0]) : -1;
        if ((a >= 0 && kiln_pass_is(&m->nodes[a], "Add")) || (sums && grads)) {
            st = kiln_pass_shape_probes(m, &sp);
            probed = !st;
        }
    }
    any = false;
    /* op-pattern: BatchNormalization -> Relu */
    for (int bi = 0; bi < m->n_nodes && !st; bi++) {
        const kiln_node *bn = &m->nodes[bi];
        if (!training_bn(bn)) continue;
        int y0 = bn->out[0], ri = kiln_pass_single_consumer(m, y0);
        if (ri < 0 || dead[ri] || kiln_pass_uses(m, y0) != 1) continue;
        const kiln_node *r = &m->nodes[ri];
        int ai = -1, z = -1; /* the residual form: y0 -> Add(., z) -> Relu */
        /* op-pattern: BatchNormalization -> Add -> Relu */
        if (kiln_pass_is(r, "Add") && r->n_in == 2 && r->n_out == 1 && r->out[0] >= 0 && r->in[0] != r->in[1] &&
            r->in[0] >= 0 && r->in[1] >= 0) {
            ai = ri;
            z = r->in[0] == y0 ? r->in[1] : r->in[0];
            const int s = r->out[0];
            ri = kiln_pass_single_consumer(m, s);
            if (ri < 0 || dead[ri] || kiln_pass_uses(m, s) != 1 || fmt(m, z) != fmt(m, y0) || fmt(m, s) != fmt(m, y0) ||
                !probed || !kiln_pass_same_shape(&sp, z, y0) || sp.one[z].dtype != sp.one[y0].dtype)
                continue;
            r = &m->nodes[ri];
            y0 = s; /* what the Relu reads */
        }
        if (!kiln_pass_is(r, "Relu") || r->n_in != 1 || r->in[0] != y0 || r->n_out != 1 || r->out[0] < 0) continue;
        const int y = r->out[0];
        if (fmt(m, y) != fmt(m, y0)) continue; /* Relu keeps the dtype */
        if ((st = kiln_pass_set_int(m, bi, "relu", 1))) break;
        if (z >= 0 && (st = kiln_pass_set_input(m, bi, 5, z))) break;
        m->nodes[bi].out[0] = y;
        dead[ri] = true;
        if (ai >= 0) dead[ai] = true;
        any = true;
    }
    /* op-pattern: ReluGrad -> BatchNormGrad */
    for (int ui = 0; ui < m->n_nodes && !st; ui++) {
        const kiln_node *u = &m->nodes[ui];
        /* op-pattern: ReluGrad */
        if (dead[ui] || !kiln_pass_is_kiln(u, "UnaryGrad") || strcmp(kiln_attr_string(u, "op", ""), "Relu") != 0 ||
            u->n_in != 3 || u->in[0] < 0 || u->in[1] >= 0 || u->in[2] < 0 || u->n_out != 1 || u->out[0] < 0)
            continue;
        const int g = u->in[0], y = u->in[2], g0 = u->out[0], uses = kiln_pass_uses(m, g0);
        int di = kiln_pass_single_consumer(m, g0);
        /* the residual form: g0 read by others too; the BatchNormGrad reading it as dY, that
         * of the BatchNormalization writing y where there are several (a downsampling
         * block's shortcut BN reads g0 too) */
        int xy = -1; /* X of y's BatchNormalization */
        /* op-pattern: BatchNormalization -> (its Relu's gradient) -> BatchNormGrad */
        for (int i = 0; i < m->n_nodes && uses > 1 && xy < 0; i++)
            if (kiln_pass_is(&m->nodes[i], "BatchNormalization") && m->nodes[i].n_out > 0 && m->nodes[i].out[0] == y)
                xy = m->nodes[i].in[0];
        /* op-pattern: BatchNormalization -> (its Relu's gradient) -> BatchNormGrad */
        for (int i = 0; i < m->n_nodes && uses > 1; i++)
            if (!dead[i] && kiln_pass_is_kiln(&m->nodes[i], "BatchNormGrad") && m->nodes[i].n_in == 6 &&
                m->nodes[i].in[0] == g0 && (di < 0 || m->nodes[i].in[1] == xy))
                di = i;
        if (di < 0 || dead[di]) continue;
        const kiln_node *d = &m->nodes[di];
        if (!kiln_pass_is_kiln(d, "BatchNormGrad") || d->n_in != 6 || d->in[0] != g0 || kiln_attr_int(d, "relu", 0) != 0)
            continue;
        int reads = 0; /* g0 read as dY alone by the BatchNormGrad */
        for (int k = 0; k < d->n_in; k++) reads += d->in[k] == g0;
        const bool shared = uses > 1;
        if (reads != 1 || (shared && d->n_out > 5)) continue;
        /* dtypes: UnaryGrad's own checks (Y and dX of dY's dtype) are those relu = 1 asks for */
        if (fmt(m, g) != fmt(m, g0) || fmt(m, y) != fmt(m, g0)) continue;
        if (shared && (st = kiln_pass_set_output(m, di, 5, g0))) break;
        /* the mask from X: the forward's saved statistics (its output 3, made here if absent) */
        const int bi = !shared && mask_from_x_on(o) && !(probed && sum_folds(m, g)) ? fused_bn_of(m, y, d) : -1;
        int sv = -1;
        if (bi >= 0) {
            sv = m->nodes[bi].n_out > 3 ? m->nodes[bi].out[3] : -1;
            if (sv < 0) {
                char hint[256];
                snprintf(hint, sizeof hint, "%s.saved_stats", m->nodes[bi].name);
                if ((sv = kiln_pass_new_value(m, hint)) < 0) {
                    st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for a value");
                    break;
                }
                if ((st = kiln_pass_set_output(m, bi, 3, sv))) break;
            }
            if ((st = kiln_pass_set_int(m, di, "relu_mask_from_x", 1))) break;
        }
        st = kiln_pass_set_input(m, di, 6, sv >= 0 ? sv : y);
        if (!st) st = kiln_pass_set_int(m, di, "relu", 1);
        if (st) break;
        m->nodes[di].in[0] = g;
        dead[ui] = true;
        any = true;
    }
    /* op-pattern: Sum -> BatchNormGrad (after the UnaryGrads above are gone: their Sum's
     * reader is the BatchNormGrad now) */
    if (!st && any) {
        kiln_pass_remove_nodes(m, dead);
        memset(dead, 0, ((size_t)m->n_nodes + 1) * sizeof *dead);
    }
    for (int si = 0; si < m->n_nodes && !st && probed; si++) {
        const kiln_node *sn = &m->nodes[si];
        if (dead[si] || !kiln_pass_is(sn, "Sum") || sn->n_in != 2 || sn->n_out != 1 || sn->out[0] < 0 || sn->in[0] < 0 ||
            sn->in[1] < 0)
            continue;
        const int a = sn->in[0], b = sn->in[1], s = sn->out[0], di = kiln_pass_single_consumer(m, s);
        if (di < 0 || dead[di] || kiln_pass_uses(m, s) != 1) continue;
        const kiln_node *d = &m->nodes[di];
        if (!kiln_pass_is_kiln(d, "BatchNormGrad") || d->n_in < 6 || d->n_in > 7 || d->in[0] != s ||
            kiln_attr_int(d, "relu_mask_from_x", 0) != 0)
            continue;
        if (fmt(m, a) != fmt(m, s) || fmt(m, b) != fmt(m, s) || !kiln_pass_same_shape(&sp, a, s) ||
            !kiln_pass_same_shape(&sp, b, s) || sp.one[a].dtype != sp.one[s].dtype || sp.one[b].dtype != sp.one[s].dtype)
            continue;
        if ((st = kiln_pass_set_input(m, di, 7, b))) break;
        m->nodes[di].in[0] = a;
        dead[si] = true;
        any = true;
    }
    if (!st && any) {
        kiln_pass_remove_nodes(m, dead);
        st = kiln_pass_sort_nodes(m);
        *changed = true;
    }
    kiln_pass_shape_probes_free(&sp);
    free(dead);
    return st;
}
