/* registry.c — the op registry, generated from ops.def. */
#include "internal.h"

#include <string.h>

#define KILN_OP(sym) extern const kiln_op_def kiln_op_##sym;
#include "../ops/ops.def"
#undef KILN_OP

static const kiln_op_def *const registry[] = {
#define KILN_OP(sym) &kiln_op_##sym,
#include "../ops/ops.def"
#undef KILN_OP
};

int kiln_op_count(void) { return (int)(sizeof registry / sizeof registry[0]); }

const kiln_op_def *kiln_op_get(int i) {
    return (i >= 0 && i < kiln_op_count()) ? registry[i] : NULL;
}

const char *kiln_op_name(int i) {
    const kiln_op_def *d = kiln_op_get(i);
    return d ? d->name : NULL;
}

static bool is_default_domain(const char *d) { return !d || !*d || strcmp(d, "ai.onnx") == 0; }

int kiln_op_index_domain(const char *domain, const char *name) {
    if (!name) return -1;
    for (int i = 0; i < kiln_op_count(); i++) {
        const kiln_op_def *d = registry[i];
        bool same_domain = is_default_domain(domain) ? is_default_domain(d->domain)
                                                     : (d->domain && strcmp(d->domain, domain) == 0);
        if (same_domain && strcmp(d->name, name) == 0) return i;
    }
    return -1;
}

int kiln_op_index(const char *name) { return kiln_op_index_domain(NULL, name); }

const kiln_op_def *kiln_op_find(const char *name) { return kiln_op_get(kiln_op_index(name)); }

const kiln_op_def *kiln_node_def(const kiln_node *n) {
    /* by name: passes rewrite nodes in place, so a cached n->op may be stale */
    return n ? kiln_op_get(kiln_op_index_domain(n->domain, n->op_type)) : NULL;
}

bool kiln_node_training_form(const kiln_node *n) {
    const kiln_op_def *d = kiln_node_def(n);
    if (!d || !d->training) return false;
    const kiln_op_training *t = d->training;
    if (t->mode_attr && kiln_attr_int(n, t->mode_attr, 0) != 0) return true;
    return t->mode_input > 0 && n->n_in > t->mode_input && n->in[t->mode_input] >= 0;
}

const char *kiln_eltwise_token(const kiln_op_def *d) {
    if (!d || !d->eltwise) return NULL;
    return d->eltwise->token ? d->eltwise->token : d->name;
}
