/* train.c — what every backend's training engine shares (see backend.h). */
#include "../core/backend.h"
#include "../ops/optim_math.h" /* kiln_om_states */
#include "../passes/passes.h"

#include <stdlib.h>

const char *kiln_optimizer_name(kiln_optimizer o) {
    switch (o) {
    case KILN_OPTIM_SGD: return "sgd";
    case KILN_OPTIM_ADAM: return "adam";
    case KILN_OPTIM_ADAMW: return "adamw";
    case KILN_OPTIM_ADADELTA: return "adadelta";
    case KILN_OPTIM_LARS: return "lars";
    case KILN_OPTIM_LAMB: return "lamb";
    }
    return "?";
}

int kiln_optimizer_states(const kiln_train_options *o) {
    return kiln_om_states((int)o->optimizer, o->momentum);
}

double kiln_train_update_bytes(const kiln_train_view *v) {
    const int ns = kiln_optimizer_states(v->opts);
    /* per element: the weight, the gradient and each state read; the weight and the states
     * written; with loss scaling the gradient is read once more (the inf/NaN check) */
    double per = 4.0 * (3 + 2 * ns) + (v->scale_input ? 4.0 : 0.0);
    double bytes = per * (double)v->param_count;
    for (int k = 0; k < v->n_states; k++) bytes += 2.0 * (double)kiln_tensor_nbytes(v->states[k].value);
    return bytes;
}

/* The update node: the producer of parameter 0's next value (kiln.OptimizerStep: inputs
 * step, found_inf, inv_scale, params, gradients, states; src/ops/optimizer_step.c). */
static int update_node(const kiln_train_view *v) {
    const kiln_model *g = v->train;
    int next = -1;
    for (int j = 0; j < v->n_carried && next < 0; j++)
        if (v->feeds[v->carried_feed[j]] == v->params[0].value) next = g->outputs[1 + j];
    for (int i = 0; i < g->n_nodes && next >= 0; i++)
        for (int k = 0; k < g->nodes[i].n_out; k++)
            if (g->nodes[i].out[k] == next) return i;
    return -1;
}

kiln_status kiln_train_lower_update(const kiln_train_view *v, kiln_model **out) {
    *out = NULL;
    kiln_context *ctx = v->ctx;
    const kiln_model *g = v->train;
    const int np = v->n_params;
    if (np < 1 || g->n_outputs != v->n_outs)
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "lowering the update: the training graph has no update nodes");
    const int u = update_node(v);
    if (u < 0 || g->nodes[u].n_in < 3 + 2 * np)
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "lowering the update: no update node for %d parameters", np);
    /* its parameters are the trainer's, in order */
    for (int k = 0; k < np; k++) {
        int fed = -1;
        for (int i = 0; i < g->n_inputs && fed < 0; i++)
            if (v->feeds[i] == v->params[k].value) fed = g->inputs[i];
        if (fed < 0 || g->nodes[u].in[3 + k] != fed)
            return kiln_fail(ctx, KILN_ERR_INTERNAL, "lowering the update: node '%s' input %d is not parameter %d",
                             g->nodes[u].name, 3 + k, k);
    }
    kiln_model *m = NULL;
    kiln_status st = kiln_model_clone(g, &m);
    if (st) return st;
    int *keep = kiln_calloc(ctx, (size_t)(1 + np + v->n_states), sizeof *keep, "lowering the update");
    if (!keep) st = KILN_ERR_OUT_OF_MEMORY;
    if (!st) {
        keep[0] = g->outputs[0];
        for (int k = 0; k < np; k++) keep[1 + k] = g->nodes[u].in[3 + np + k];
        for (int k = 0; k < v->n_states; k++) keep[1 + np + k] = g->outputs[1 + v->n_carried + k];
        for (int x = 0; x < m->n_values; x++) m->values[x].is_output = false;
        m->n_outputs = 0;
        for (int j = 0; j < 1 + np + v->n_states && !st; j++) st = kiln_model_add_output(m, m->values[keep[j]].name);
    }
    if (!st) {
        /* the nodes the outputs need; the rest only computed the carried state's next values */
        bool changed = false;
        st = kiln_pass_dead_nodes(m, NULL, &changed);
        if (!st) st = kiln_model_finalize(m);
    }
    free(keep);
    if (st) {
        kiln_model_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}
