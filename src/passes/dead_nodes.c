/* dead_nodes.c — drop nodes whose outputs no graph output depends on (e.g. the loss
 * branch of an exported training graph, or shape computations a fold made unnecessary).
 * Nodes are in topological order, so one backward sweep finds everything live. */
#include "passes.h"

#include <stdlib.h>

kiln_status kiln_pass_dead_nodes(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    (void)o;
    bool *live = calloc((size_t)m->n_values + 1, sizeof *live);
    bool *dead = calloc((size_t)m->n_nodes + 1, sizeof *dead);
    if (!live || !dead) {
        free(live);
        free(dead);
        return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int i = 0; i < m->n_outputs; i++) live[m->outputs[i]] = true;
    for (int i = m->n_nodes - 1; i >= 0; i--) {
        const kiln_node *n = &m->nodes[i];
        bool used = false;
        for (int k = 0; k < n->n_out; k++) used |= n->out[k] >= 0 && live[n->out[k]]; /* -1: an absent output */
        dead[i] = !used;
        for (int k = 0; used && k < n->n_in; k++)
            if (n->in[k] >= 0) live[n->in[k]] = true;
        *changed |= dead[i];
    }
    kiln_pass_remove_nodes(m, dead);
    free(live);
    free(dead);
    return KILN_OK;
}
