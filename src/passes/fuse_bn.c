/* fuse_bn.c — a training BatchNormalization and the Relu after it as one node each way
 * (KILN_PASS_FUSE_BN; the attribute relu of src/ops/batch_normalization.c):
 *
 *   forward   y0 = BatchNormalization(x, scale, B, mean, var) training_mode=1
 *             y = Relu(y0)
 *          -> y = BatchNormalization(x, scale, B, mean, var) training_mode=1, relu=1
 *             (running_mean / running_var outputs kept)
 *   backward  (what autograd emits for a Relu whose gradient feeds a BatchNormalization's)
 *             g0 = kiln.UnaryGrad(g, -, y) op=Relu
 *             dx, dscale, dB = kiln.BatchNormGrad(g0, x, scale, B, mean, var)
 *          -> dx, dscale, dB = kiln.BatchNormGrad(g, x, scale, B, mean, var, y) relu=1
 *
 * Why: in ResNet-50's CUDA training step the Relu after each BatchNormalization and its
 * gradient are a read and a write of the largest activations each (issue 12, bench/NOTES.md
 * "t2": Relu 2.6 ms, UnaryGrad 3.7 ms of a 51 ms step); fused they cost nothing beyond the
 * BN kernels' own passes (src/cuda/norm_train.cu).
 *
 * When: the forward, a BatchNormalization in training mode (opset >= 14, training_mode 1)
 * without relu, whose Y is read by nothing but one Relu (and is no graph output), Y and
 * the Relu's output in one layout. The BN node takes the Relu's output; the Relu
 * goes. The backward, independently (the identity holds whatever Y is): a kiln.UnaryGrad
 * op=Relu on (g, absent, y) whose output only a kiln.BatchNormGrad without relu reads, as
 * its dY (input 0, no other input), g, y and dY in one layout. The BatchNormGrad node
 * reads g and y (input 6) with relu = 1; the UnaryGrad goes. Only on devices with
 * kiln.BatchNormGrad's kernel (whose kernels take relu; the CPU's and CUDA's). Runs after
 * the layout pass (formats final). The nodes are left in a topological order. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

static kiln_format fmt(const kiln_model *m, int v) { return m->values[v].format; }

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
    any = false;
    /* op-pattern: BatchNormalization -> Relu */
    for (int bi = 0; bi < m->n_nodes && !st; bi++) {
        const kiln_node *bn = &m->nodes[bi];
        if (!training_bn(bn)) continue;
        const int y0 = bn->out[0], ri = kiln_pass_single_consumer(m, y0);
        if (ri < 0 || dead[ri] || kiln_pass_uses(m, y0) != 1) continue;
        const kiln_node *r = &m->nodes[ri];
        if (!kiln_pass_is(r, "Relu") || r->n_in != 1 || r->in[0] != y0 || r->n_out != 1 || r->out[0] < 0) continue;
        const int y = r->out[0];
        if (fmt(m, y) != fmt(m, y0)) continue; /* Relu keeps the dtype */
        if ((st = kiln_pass_set_int(m, bi, "relu", 1))) break;
        m->nodes[bi].out[0] = y;
        dead[ri] = true;
        any = true;
    }
    /* op-pattern: ReluGrad -> BatchNormGrad */
    for (int ui = 0; ui < m->n_nodes && !st; ui++) {
        const kiln_node *u = &m->nodes[ui];
        if (dead[ui] || !kiln_pass_is_kiln(u, "UnaryGrad") || strcmp(kiln_attr_string(u, "op", ""), "Relu") != 0 ||
            u->n_in != 3 || u->in[0] < 0 || u->in[1] >= 0 || u->in[2] < 0 || u->n_out != 1 || u->out[0] < 0)
            continue;
        const int g = u->in[0], y = u->in[2], g0 = u->out[0], di = kiln_pass_single_consumer(m, g0);
        if (di < 0 || dead[di] || kiln_pass_uses(m, g0) != 1) continue;
        const kiln_node *d = &m->nodes[di];
        if (!kiln_pass_is_kiln(d, "BatchNormGrad") || d->n_in != 6 || d->in[0] != g0 || kiln_attr_int(d, "relu", 0) != 0)
            continue;
        /* dtypes: UnaryGrad's own checks (Y and dX of dY's dtype) are those relu = 1 asks for */
        if (fmt(m, g) != fmt(m, g0) || fmt(m, y) != fmt(m, g0)) continue;
        st = kiln_pass_set_input(m, di, 6, y);
        if (!st) st = kiln_pass_set_int(m, di, "relu", 1);
        if (st) break;
        m->nodes[di].in[0] = g;
        dead[ui] = true;
        any = true;
    }
    if (!st && any) {
        kiln_pass_remove_nodes(m, dead);
        st = kiln_pass_sort_nodes(m);
        *changed = true;
    }
    free(dead);
    return st;
}
