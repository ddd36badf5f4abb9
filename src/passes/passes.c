/* passes.c — the pass table, the driver and helpers shared by passes; see passes.h. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Order matters: folding BN before fusing lets the fused conv absorb it; layout and
 * precision come last so they see the final op mix. */
static const kiln_pass passes[] = {
    {"dead-nodes", KILN_PASS_DEAD_NODES, kiln_pass_dead_nodes},
    /* after fusion (it pads kiln.FusedConv too), before the layout pass */
    {"pad-channels", KILN_PASS_PAD_CHANNELS, kiln_pass_pad_channels},
    /* after fusion: it classifies the final op mix; not switchable (the session asked for
     * it). Only the layout pass comes later, since precision adds values (Casts, converted
     * initializers) that would not carry a layout. */
    {"precision", 0, kiln_pass_precision},
    /* last: it lays out the final op mix, dtypes and initializers */
    {"layout", KILN_PASS_NHWC, kiln_pass_layout},
};

kiln_status kiln_passes_apply(const kiln_model *src, const kiln_pass_options *o, kiln_model **out) {
    *out = NULL;
    kiln_model *m = NULL;
    kiln_status st = kiln_model_clone(src, &m);
    if (st) return st;
    for (size_t i = 0; i < sizeof passes / sizeof passes[0] && !st; i++) {
        if (o->disabled & passes[i].flag) continue;
        bool changed = false;
        st = passes[i].run(m, o, &changed);
        if (st) kiln_msg_prefix(m->ctx, "pass %s: ", passes[i].name);
    }
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        kiln_model_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}

int kiln_pass_uses(const kiln_model *m, int v) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++) n += m->nodes[i].in[k] == v;
    for (int i = 0; i < m->n_outputs; i++) n += m->outputs[i] == v;
    return n;
}

int kiln_pass_single_consumer(const kiln_model *m, int v) {
    int who = -1, n = 0;
    for (int i = 0; i < m->n_outputs; i++)
        if (m->outputs[i] == v) return -1;
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++)
            if (m->nodes[i].in[k] == v) {
                if (who != i) n++;
                who = i;
            }
    return n == 1 ? who : -1;
}

void kiln_pass_replace_uses(kiln_model *m, int from, int to) {
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++)
            if (m->nodes[i].in[k] == from) m->nodes[i].in[k] = to;
    for (int i = 0; i < m->n_outputs; i++)
        if (m->outputs[i] == from) m->outputs[i] = to;
}

void kiln_pass_remove_nodes(kiln_model *m, const bool *dead) {
    int w = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        kiln_node *n = &m->nodes[i];
        if (!dead[i]) {
            if (w != i) m->nodes[w] = *n;
            w++;
            continue;
        }
        free(n->op_type);
        free(n->name);
        free(n->domain);
        free(n->in);
        free(n->out);
        for (int a = 0; a < n->n_attrs; a++) kiln_attr_clear(&n->attrs[a]);
        free(n->attrs);
    }
    m->n_nodes = w;
}

int kiln_pass_new_value(kiln_model *m, const char *hint) {
    char name[256];
    snprintf(name, sizeof name, "%s#%d", hint, m->n_values);
    return kiln_model_get_value(m, name);
}
