/* train_graph.h — the trainer's forward + backward graph, for the tests that take the
 * trainer's training graph as a fixture for passes and plans. The trainer's own graph also
 * updates the weights (the optimizer is graph nodes on the CPU, updating its inputs in place:
 * two runs over the same feeds would differ); this copy has the outputs it had before the
 * update joined it: the loss, every gradient, the updated statistics, and nothing that does
 * not reach them. Its inputs are the trainer's (t->feeds fits it). */
#ifndef KILN_TEST_TRAIN_GRAPH_H
#define KILN_TEST_TRAIN_GRAPH_H

#include "train/trainer_internal.h"

#include <string.h>

/* The graph a backend that lowers the update plans (kiln_train_lower_update, as the CUDA
 * engine does): for a trainer without mixed precision, its outputs are the loss, autograd's
 * gradients and the statistics. NULL on failure, the context's message saying why. */
static kiln_model *backward_graph(const kiln_trainer *t) {
    kiln_model *m = NULL;
    kiln_status st = kiln_train_lower_update(&t->view, &m);
    for (int k = 0; !st && k < t->n_params; k++)
        if (strcmp(kiln_model_output_name(m, 1 + k), t->train->values[t->params[k].grad_value].name) != 0)
            st = kiln_fail(t->ctx, KILN_ERR_INTERNAL, "output %d is '%s', not parameter %d's gradient", 1 + k,
                           kiln_model_output_name(m, 1 + k), k);
    if (st) {
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

#endif
