/* train_graph.h — the trainer's forward + backward graph, for the tests that take the
 * trainer's training graph as a fixture for passes and plans. The trainer's own graph also
 * updates the weights (the optimizer is graph nodes on the CPU, updating its inputs in place:
 * two runs over the same feeds would differ); this copy has the outputs it had before the
 * update joined it: the loss, every gradient, the updated statistics, and nothing that does
 * not reach them. Its inputs are the trainer's (t->feeds fits it). Include where CHECK
 * (check.h's) and `static kiln_context *ctx;` are defined. */
#ifndef KILN_TEST_TRAIN_GRAPH_H
#define KILN_TEST_TRAIN_GRAPH_H

#include "passes/passes.h"
#include "train/trainer_internal.h"

#include <stdlib.h>

/* t: a CPU trainer without mixed precision (its graph not rewritten by passes, so its value
 * indices are the trainer's). NULL on failure, with a failed check. */
static kiln_model *backward_graph(const kiln_trainer *t) {
    kiln_model *m = NULL;
    kiln_status st = kiln_model_clone(t->train, &m);
    const int loss = st ? -1 : m->outputs[0];
    bool *need = st ? NULL : calloc((size_t)m->n_values + 1, sizeof *need);
    bool *dead = st ? NULL : calloc((size_t)m->n_nodes + 1, sizeof *dead);
    if (!st && (!need || !dead)) st = KILN_ERR_OUT_OF_MEMORY;
    if (!st) {
        for (int v = 0; v < m->n_values; v++) m->values[v].is_output = false;
        m->n_outputs = 0;
        st = kiln_model_add_output(m, m->values[loss].name);
        for (int k = 0; k < t->n_params && !st; k++) st = kiln_model_add_output(m, m->values[t->params[k].grad_value].name);
        for (int k = 0; k < t->n_states && !st; k++) st = kiln_model_add_output(m, m->values[t->states[k].out_value].name);
    }
    if (!st) {
        for (int i = 0; i < m->n_outputs; i++) need[m->outputs[i]] = true;
        for (int i = m->n_nodes - 1; i >= 0; i--) {
            const kiln_node *n = &m->nodes[i];
            bool any = false;
            for (int k = 0; k < n->n_out; k++) any |= need[n->out[k]];
            dead[i] = !any;
            for (int k = 0; any && k < n->n_in; k++)
                if (n->in[k] >= 0) need[n->in[k]] = true;
        }
        kiln_pass_remove_nodes(m, dead);
        st = kiln_model_finalize(m);
    }
    free(need);
    free(dead);
    if (st) {
        CHECK(0, "the trainer's forward + backward graph: %s", kiln_context_message(ctx));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

#endif
