/* fuse_loss.c — the training loss chain as two ops (KILN_PASS_FUSE_LOSS; src/ops/log_softmax_nll.c):
 *
 *   forward   log_prob = LogSoftmax(X)                          X (N, C) f32, along C
 *             loss = NegativeLogLikelihoodLoss(log_prob, target, weight?)   mean or sum
 *          -> loss [, log_prob] = kiln.LogSoftmaxNLL(X, target, weight?)
 *   backward  (what autograd emits for that pair: the rules in loss_common.c, softmax_common.c)
 *             dlogp = kiln.NegativeLogLikelihoodLossGrad(log_prob, target, weight?, dLoss)
 *             dX = kiln.LogSoftmaxGrad(log_prob, dlogp)
 *          -> dX = kiln.LogSoftmaxNLLGrad(X, target, weight?, dLoss)
 *
 * Why: on CUDA the chain was four small kernels on the step's critical path (six under AMP,
 * with the Casts of the logits to f32 and of their gradient back: the fused ops read a
 * low-precision X as it is, computing in f32, and the precision pass knows it).
 *
 * When: X is f32 (the pass runs before the precision pass) of rank 2, the LogSoftmax is
 * along C (axis 1 or -1, whatever the opset), the targets are int32/int64 (what both
 * backends take), the reduction is mean or sum; ignore_index and weights are carried over.
 * log_prob stays an output of the fused op (f32, as before) when anything besides the
 * chain reads it, including the graph's outputs. The backward pair is replaced only when
 * it is exactly that pair on the same log_prob, target, weight and attributes, and the NLL
 * gradient has no other reader; otherwise it stays as it is, reading the kept log_prob.
 *
 * Then the pair becomes one node where it can: the gradient's inputs (X, target, weight,
 * dLoss) are all there when the forward runs, so
 *             loss = kiln.LogSoftmaxNLL(X, target, weight?)
 *             dX = kiln.LogSoftmaxNLLGrad(X, target, weight?, dLoss)
 *          -> dX, -, loss = kiln.LogSoftmaxNLLGrad(X, target, weight?, dLoss)
 * (output 2 is the forward's loss bit for bit; src/ops/log_softmax_nll.c) standing where
 * the forward stood: one kernel instead of two dependent ones on the step's critical path.
 * When: the forward keeps no log_prob, the backward was fused (so it has no dLogProb), and
 * dLoss does not depend on the loss. f32 training's seed dLoss = ConstantOfShape(Shape(loss))
 * (src/train/autograd.c) does, through the loss's shape only: a mean or sum loss is a
 * scalar, so the seed becomes a scalar initializer of the ConstantOfShape's value first
 * (its Shape and ConstantOfShape go where nothing else reads them). AMP's seed, the graph
 * input "kiln:loss_scale", needs nothing. Any other dLoss computed from the loss keeps the
 * forward node.
 *
 * Only on devices that have both ops' kernels (kiln_pass_device_has). The nodes are left in
 * a topological order. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

/* A (Log)Softmax or its gradient node along the class dim of a rank-2 input: axis 1 or -1
 * (opsets 11/12 coerce to 2-D at axis, which for rank 2 is the same rows). */
static bool class_axis(const kiln_node *n) {
    const int64_t axis = kiln_attr_int(n, "axis", n->opset < 13 ? 1 : -1);
    return axis == 1 || axis == -1;
}

static bool same_attrs(const kiln_node *a, const kiln_node *b) {
    const bool ia = kiln_node_attr(a, "ignore_index") != NULL, ib = kiln_node_attr(b, "ignore_index") != NULL;
    return strcmp(kiln_attr_string(a, "reduction", "mean"), kiln_attr_string(b, "reduction", "mean")) == 0 && ia == ib &&
           kiln_attr_int(a, "ignore_index", 0) == kiln_attr_int(b, "ignore_index", 0);
}

/* The NLL gradient g and the LogSoftmaxGrad s autograd emitted for the pair
 * (ls, nll) reading log_prob; -1 each when they are not there as expected. */
static void find_backward(const kiln_model *m, const bool *dead, int ls, int nll, int *g_out, int *s_out) {
    *g_out = *s_out = -1;
    const kiln_node *l = &m->nodes[nll];
    const int logp = l->in[0];
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *g = &m->nodes[i];
        if (dead[i] || !kiln_pass_is_kiln(g, "NegativeLogLikelihoodLossGrad") || g->n_in != 4 || g->n_out != 1 || g->in[0] != logp ||
            g->in[1] != l->in[1] || g->in[2] != kiln_pass_opt_in(l, 2) || g->in[3] < 0 || !same_attrs(g, l))
            continue;
        const int dlogp = g->out[0], s = dlogp >= 0 ? kiln_pass_single_consumer(m, dlogp) : -1;
        if (s < 0 || dead[s]) continue;
        const kiln_node *sn = &m->nodes[s];
        if (!kiln_pass_is_kiln(sn, "LogSoftmaxGrad") || sn->n_in != 2 || sn->n_out != 1 || sn->in[0] != logp ||
            sn->in[1] != dlogp || !class_axis(sn) || sn->opset != m->nodes[ls].opset)
            continue;
        *g_out = i;
        *s_out = s;
        return;
    }
}

/* Readers of v among the live nodes, and the graph outputs. */
static int live_uses(const kiln_model *m, const bool *dead, int v) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_in && !dead[i]; k++) n += m->nodes[i].in[k] == v;
    for (int i = 0; i < m->n_outputs; i++) n += m->outputs[i] == v;
    return n;
}

/* Whether value v is computed from an output of node `node` (prod: the producers of the
 * values that were there when it was made, nv0 of them; later values are initializers). */
static kiln_status depends_on(const kiln_model *m, const int *prod, int nv0, int v, int node, bool *out) {
    *out = false;
    bool *seen = kiln_calloc(m->ctx, (size_t)m->n_nodes + 1, sizeof *seen, "a pass");
    int *stack = kiln_malloc(m->ctx, ((size_t)m->n_nodes + 1) * sizeof *stack, "a pass");
    int top = 0;
    if (seen && stack && v >= 0 && v < nv0 && prod[v] >= 0) {
        seen[prod[v]] = true;
        stack[top++] = prod[v];
    }
    while (top > 0 && !*out) {
        const int i = stack[--top];
        const kiln_node *n = &m->nodes[i];
        *out = i == node;
        for (int k = 0; k < n->n_in; k++) {
            const int u = n->in[k], p = u >= 0 && u < nv0 ? prod[u] : -1;
            if (p >= 0 && !seen[p]) {
                seen[p] = true;
                stack[top++] = p;
            }
        }
    }
    kiln_status st = seen && stack ? KILN_OK : KILN_ERR_OUT_OF_MEMORY;
    free(seen);
    free(stack);
    return st;
}

/* f32 training's seed dL/dloss = ConstantOfShape(Shape(loss)) (src/train/autograd.c),
 * value v: the ConstantOfShape node (its Shape in *shape), or -1. The loss of a mean or
 * sum is a scalar, so the seed is the scalar of the ConstantOfShape's value. */
static int loss_seed(const kiln_model *m, const int *prod, const kiln_tensor *vt, int nv0, int v, int loss, int *shape) {
    const int c = v >= 0 && v < nv0 ? prod[v] : -1;
    if (c < 0 || !kiln_pass_is(&m->nodes[c], "ConstantOfShape") || m->nodes[c].n_in != 1 || m->nodes[c].n_out != 1)
        return -1;
    const int sv = m->nodes[c].in[0], sh = sv >= 0 && sv < nv0 ? prod[sv] : -1;
    if (sh < 0 || !kiln_pass_is(&m->nodes[sh], "Shape") || m->nodes[sh].n_in != 1 || m->nodes[sh].in[0] != loss)
        return -1;
    const kiln_attr *a = kiln_node_attr(&m->nodes[c], "value");
    if (!a || a->type != KILN_ATTR_TENSOR || !a->t || kiln_tensor_numel(a->t) != 1 ||
        a->t->dtype != vt[loss].dtype)
        return -1;
    *shape = sh;
    return c;
}

/* The forward f (LogSoftmaxNLL, no log_prob) into the fused gradient b (reading dLoss):
 * where dLoss does not depend on the loss (f32's seed made a scalar initializer first),
 * b moves to f's place with the loss as its output 2, and f is marked dead. */
static kiln_status merge(kiln_model *m, int *prod, int nv0, bool *dead, const kiln_tensor *vt, int f, int b) {
    const int loss = m->nodes[f].out[0], dl = m->nodes[b].in[3];
    int shape = -1;
    const int seed = loss_seed(m, prod, vt, nv0, dl, loss, &shape);
    bool dep = false;
    kiln_status st = seed < 0 ? depends_on(m, prod, nv0, dl, f, &dep) : KILN_OK;
    if (st || dep || vt[loss].ndim != 0) return st;
    if (seed >= 0) {
        const kiln_tensor *val = kiln_node_attr(&m->nodes[seed], "value")->t;
        kiln_tensor *t = kiln_tensor_new(m->ctx, val->dtype, 0, NULL);
        if (t) kiln_set_f64(t, 0, kiln_get_f64(val, 0));
        const int init = t ? kiln_pass_add_initializer(m, "dloss", t) : -1;
        if (init < 0) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
        m->nodes[b].in[3] = init;
        dead[seed] = live_uses(m, dead, dl) == 0;
        dead[shape] = dead[seed] && live_uses(m, dead, m->nodes[shape].out[0]) == 0;
    }
    int *out = realloc(m->nodes[b].out, 3 * sizeof *out);
    if (!out) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (m->nodes[b].n_out < 2) out[1] = -1;
    out[2] = loss;
    m->nodes[b].out = out;
    m->nodes[b].n_out = 3;
    const kiln_node moved = m->nodes[b];
    m->nodes[b] = m->nodes[f];
    m->nodes[f] = moved;
    dead[b] = true;
    prod[loss] = prod[out[0]] = f;
    return KILN_OK;
}

kiln_status kiln_pass_fuse_loss(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    /* op-pattern: LogSoftmax -> NegativeLogLikelihoodLoss as kiln.LogSoftmaxNLL(Grad) */
    if (!kiln_pass_device_has(o, "LogSoftmaxNLL") || !kiln_pass_device_has(o, "LogSoftmaxNLLGrad")) return KILN_OK;
    kiln_tensor *vt = NULL;
    int *prod = kiln_pass_producers(m);
    bool *dead = kiln_calloc(m->ctx, (size_t)m->n_nodes + 1, sizeof *dead, "a pass");
    kiln_status st = prod && dead ? kiln_pass_infer_types(m, &vt) : KILN_ERR_OUT_OF_MEMORY;
    const int nv0 = m->n_values; /* prod and vt cover these values; merge adds initializers */
    bool any = false;
    for (int ni = 0; ni < m->n_nodes && !st; ni++) {
        const kiln_node *l = &m->nodes[ni];
        if (dead[ni] || !kiln_pass_is(l, "NegativeLogLikelihoodLoss") || l->n_out != 1 || l->n_in < 2 || l->n_in > 3 ||
            l->in[0] < 0 || l->in[1] < 0)
            continue;
        const char *red = kiln_attr_string(l, "reduction", "mean");
        const kiln_dtype tdt = vt[l->in[1]].dtype;
        if ((strcmp(red, "mean") != 0 && strcmp(red, "sum") != 0) || (tdt != KILN_I32 && tdt != KILN_I64)) continue;
        const int logp = l->in[0], ls = prod[logp];
        if (ls < 0 || dead[ls]) continue;
        const kiln_node *sm = &m->nodes[ls];
        if (!kiln_pass_is(sm, "LogSoftmax") || sm->n_in != 1 || sm->n_out != 1 || sm->in[0] < 0 || !class_axis(sm))
            continue;
        const int x = sm->in[0];
        if (vt[x].dtype != KILN_F32 || vt[x].ndim != 2) continue;
        int g = -1, s = -1;
        find_backward(m, dead, ls, ni, &g, &s);
        /* readers of log_prob besides the chain (the graph's outputs count) */
        const int others = kiln_pass_uses(m, logp) - 1 - (g >= 0 ? 2 : 0);
        const int target = l->in[1], weight = kiln_pass_opt_in(l, 2);
        const int in[3] = {x, target, weight};
        st = kiln_pass_rewrite(m, ni, "kiln", "LogSoftmaxNLL", weight >= 0 ? 3 : 2, in, &m->nodes[ni]);
        if (!st && others > 0) {
            kiln_node *f = &m->nodes[ni];
            int *out = realloc(f->out, 2 * sizeof *out);
            if (!out) {
                st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
                break;
            }
            out[1] = logp;
            f->out = out;
            f->n_out = 2;
            prod[logp] = ni;
        }
        if (!st && g >= 0) {
            const int bin[4] = {x, target, weight, m->nodes[g].in[3]};
            st = kiln_pass_rewrite(m, s, "kiln", "LogSoftmaxNLLGrad", 4, bin, &m->nodes[g]);
            dead[g] = true;
            if (!st && others == 0) st = merge(m, prod, nv0, dead, vt, ni, s);
        }
        dead[ls] = true;
        any = true;
    }
    if (!st && any) {
        kiln_pass_remove_nodes(m, dead);
        /* the fused forward sits where the NLL was, and a kept log_prob may have readers
         * before it; a merged gradient where the forward was may read a dLoss computed
         * after it */
        st = kiln_pass_sort_nodes(m);
        *changed = true;
    }
    free(vt);
    free(prod);
    free(dead);
    return st;
}
