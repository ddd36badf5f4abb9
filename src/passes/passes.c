/* passes.c — the pass table, the driver and helpers shared by passes; see passes.h. */
#include "passes.h"
#include "../core/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Order matters: folding BN before fusing lets the fused conv absorb it; precision and
 * layout come late so they see the final op mix. */
static const kiln_pass passes[] = {
    {"dead-nodes", KILN_PASS_DEAD_NODES, kiln_pass_dead_nodes},
    /* before every fusion: they see a constant a subgraph computes as a constant */
    {"fold-constants", KILN_PASS_FOLD_CONSTANTS, kiln_pass_fold_constants},
    {"fold-bn", KILN_PASS_FOLD_BN, kiln_pass_fold_bn},
    /* before fuse-conv: the residual Add then meets the product (gemm-residual) */
    {"fold-scale", KILN_PASS_FOLD_SCALE, kiln_pass_fold_scale},
    /* after fold-bn: it crops the folded weights */
    {"crop-taps", KILN_PASS_CROP_TAPS, kiln_pass_crop_taps},
    /* before the layout pass, which lays its Transpose out with its neighbours */
    {"space-to-depth", KILN_PASS_SPACE_TO_DEPTH, kiln_pass_space_to_depth},
    /* before precision and layout: the pool it makes stays low and NHWC */
    {"mean-pool", KILN_PASS_MEAN_POOL, kiln_pass_mean_pool},
    /* after fold-bn (a BN between the two would no longer meet its convolution), before
     * fuse-conv (which would take the convolution's bias and activation); mean-pool's switch */
    {"pool-conv", KILN_PASS_MEAN_POOL, kiln_pass_pool_conv},
    /* before fuse-conv and fuse-eltwise: they would take the product's bias Add and the
     * scale Muls that the attention chain holds */
    {"fuse-attention", KILN_PASS_FUSE_ATTENTION, kiln_pass_fuse_attention},
    /* after fold-bn (the folded weight), before fuse-conv (the product's bias and activation) */
    {"conv-patch", KILN_PASS_CONV_PATCH, kiln_pass_conv_patch},
    {"fuse-conv", KILN_PASS_FUSE_CONV, kiln_pass_fuse_conv},
    {"fuse-eltwise", KILN_PASS_FUSE_ELTWISE, kiln_pass_fuse_eltwise},
    /* before precision: it matches the fp32 chain, and the precision pass then lets the
     * fused loss read a low-precision X with no Cast */
    {"fuse-loss", KILN_PASS_FUSE_LOSS, kiln_pass_fuse_loss},
    /* after fusion (it pads kiln.FusedConv too), before the layout pass */
    {"pad-channels", KILN_PASS_PAD_CHANNELS, kiln_pass_pad_channels},
    /* after fusion: it classifies the final op mix; not switchable (the session asked for
     * it). Only the layout pass comes later, since precision adds values (Casts, converted
     * initializers) that would not carry a layout. */
    {"precision", 0, kiln_pass_precision},
    /* it lays out the final op mix, dtypes and initializers */
    {"layout", KILN_PASS_NHWC, kiln_pass_layout},
    /* after layout: it joins moves whose values share a layout, and the layout pass's
     * channel shuffles */
    {"channel-gather", KILN_PASS_CHANNEL_GATHER, kiln_pass_channel_gather},
    /* after layout: it takes only values the layout pass left in their logical layout */
    {"row-gather", KILN_PASS_ROW_GATHER, kiln_pass_row_gather},
    /* after layout: it fuses only where the layout pass made the pool's input NHWC */
    {"fuse-pool", KILN_PASS_FUSE_POOL, kiln_pass_fuse_pool},
    /* after layout: it fuses only where the BN's and the Relu's layouts agree */
    {"fuse-bn", KILN_PASS_FUSE_BN, kiln_pass_fuse_bn},
    /* after fuse-bn (which fuses BNs of five inputs); opt-in (o->conv_bn_stats), so no bit */
    {"conv-bn-stats", 0, kiln_pass_conv_bn_stats},
    /* after conv-bn-stats (statistics inputs final); opt-in (o->conv_bn_prologue), so no bit */
    {"conv-bn-prologue", 0, kiln_pass_conv_bn_prologue},
    /* after fuse-bn (BN -> Relu as one node, the gradient's mask from X) and conv-bn-stats:
     * the stem's BN, Relu and pool as one kernel (fuse-pool's switch) */
    {"fuse-bn-pool", KILN_PASS_FUSE_POOL, kiln_pass_fuse_bn_pool},
};

kiln_status kiln_passes_apply(const kiln_model *src, const kiln_pass_options *o, kiln_model **out) {
    *out = NULL;
    kiln_model *m = NULL;
    kiln_status st = kiln_model_clone(src, &m);
    if (st) return st;
    for (size_t i = 0; i < sizeof passes / sizeof passes[0] && !st; i++) {
        if (o->disabled & passes[i].flag) continue;
        bool changed = false;
        const int before = m->n_nodes;
        st = passes[i].run(m, o, &changed);
        if (st) kiln_msg_prefix(m->ctx, "pass %s: ", passes[i].name);
        else
            kiln_log(m->ctx, KILN_LOG_DEBUG, "pass %s: %s (%d nodes -> %d)", passes[i].name,
                     changed ? "rewrote the graph" : "nothing to do", before, m->n_nodes);
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

kiln_status kiln_pass_sort_nodes(kiln_model *m) {
    int *order = malloc(((size_t)m->n_nodes + 1) * sizeof *order);
    kiln_node *tmp = malloc(((size_t)m->n_nodes + 1) * sizeof *tmp);
    kiln_status st = order && tmp ? kiln_pass_topo_order(m, order) : kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (!st && m->n_nodes > 0) { /* (no nodes: m->nodes may be NULL, not memcpy's) */
        for (int i = 0; i < m->n_nodes; i++) tmp[i] = m->nodes[order[i]];
        memcpy(m->nodes, tmp, (size_t)m->n_nodes * sizeof *tmp);
    }
    free(order);
    free(tmp);
    return st;
}

int kiln_pass_new_value(kiln_model *m, const char *hint) {
    char name[256];
    snprintf(name, sizeof name, "%s#%d", hint, m->n_values);
    return kiln_model_get_value(m, name);
}

bool kiln_pass_is_kiln(const kiln_node *n, const char *op_type) {
    return strcmp(n->domain, "kiln") == 0 && strcmp(n->op_type, op_type) == 0;
}

int kiln_pass_opt_in(const kiln_node *n, int k) { return k < n->n_in ? n->in[k] : -1; }

bool kiln_pass_is(const kiln_node *n, const char *op_type) {
    return (!n->domain[0] || strcmp(n->domain, "ai.onnx") == 0) && strcmp(n->op_type, op_type) == 0;
}

int *kiln_pass_producers(const kiln_model *m) {
    int *p = kiln_malloc(m->ctx, ((size_t)m->n_values + 1) * sizeof *p, "a pass's producer table");
    if (!p) return NULL;
    for (int v = 0; v < m->n_values; v++) p[v] = -1;
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_out; k++)
            if (m->nodes[i].out[k] >= 0) p[m->nodes[i].out[k]] = i;
    return p;
}

const kiln_tensor *kiln_pass_constant(const kiln_model *m, const int *producer, int v) {
    if (v < 0) return NULL;
    if (m->values[v].init) return m->values[v].init;
    const int p = producer[v];
    if (p < 0 || !kiln_pass_is(&m->nodes[p], "Constant")) return NULL;
    const kiln_attr *a = kiln_node_attr(&m->nodes[p], "value");
    return a && a->type == KILN_ATTR_TENSOR ? a->t : NULL;
}

const kiln_tensor *kiln_pass_constant_through(const kiln_model *m, const int *producer, int v) {
    for (int hops = 0; v >= 0 && v < m->n_values && producer[v] >= 0 && hops < 8; hops++) {
        const kiln_node *p = &m->nodes[producer[v]];
        if (!kiln_pass_is(p, "Identity") || p->n_in < 1) break; /* op-pattern */
        v = p->in[0];
    }
    return kiln_pass_constant(m, producer, v);
}

bool kiln_pass_device_has(const kiln_pass_options *o, const char *op) {
    const kiln_backend_i *b = kiln_backend_for(o->device);
    return b && b->has_op(kiln_op_index_domain("kiln", op));
}

kiln_status kiln_pass_value_probes(kiln_model *m, kiln_value_probes *p) {
    memset(p, 0, sizeof *p);
    p->n = m->n_values;
    kiln_status st = kiln_pass_infer_values(m, 320, &p->a, &p->ha);
    if (!st) st = kiln_pass_infer_values(m, 448, &p->b, &p->hb);
    return st;
}

void kiln_pass_value_probes_free(kiln_value_probes *p) {
    for (int v = 0; v < p->n; v++) {
        if (p->ha) kiln_tensor_free(p->ha[v]);
        if (p->hb) kiln_tensor_free(p->hb[v]);
    }
    free(p->ha);
    free(p->hb);
    free(p->a);
    free(p->b);
    memset(p, 0, sizeof *p);
}

int kiln_pass_probe_ints(const kiln_value_probes *p, int v, int64_t *out, int max) {
    if (v < 0 || v >= p->n || !p->a || !p->b) return -1;
    const kiln_tensor *a = &p->a[v], *b = &p->b[v];
    if (!a->data || !b->data || (a->dtype != KILN_I64 && a->dtype != KILN_I32) || a->dtype != b->dtype) return -1;
    const int64_t n = kiln_tensor_numel(a);
    if (n != kiln_tensor_numel(b) || n > max) return -1;
    for (int64_t k = 0; k < n; k++) {
        out[k] = kiln_get_i64(a, k);
        if (out[k] != kiln_get_i64(b, k)) return -1;
    }
    return (int)n;
}

bool kiln_pass_probe_zero(const kiln_value_probes *p, int v) {
    if (v < 0) return true;
    if (v >= p->n || !p->a || !p->b || !p->a[v].data || !p->b[v].data || kiln_tensor_numel(&p->a[v]) != 1 ||
        kiln_tensor_numel(&p->b[v]) != 1)
        return false;
    return kiln_get_f64(&p->a[v], 0) == 0 && kiln_get_f64(&p->b[v], 0) == 0;
}

int kiln_pass_add_initializer(kiln_model *m, const char *hint, kiln_tensor *t) {
    int v = kiln_pass_new_value(m, hint);
    if (v < 0) {
        kiln_tensor_free(t);
        return -1;
    }
    kiln_value *val = &m->values[v];
    val->init = t;
    val->dtype = t->dtype;
    val->ndim = t->ndim;
    memcpy(val->dims, t->dims, sizeof val->dims);
    return v;
}

int kiln_pass_add_i64s(kiln_model *m, const char *hint, int n, const int64_t *d) {
    kiln_tensor *t = kiln_tensor_new(m->ctx, KILN_I64, 1, (int64_t[]){n});
    if (!t) return -1;
    memcpy(t->data, d, (size_t)n * sizeof *d);
    return kiln_pass_add_initializer(m, hint, t);
}

int kiln_pass_append_node(kiln_model *m, const char *op, const char *name, int n_in, const int *in, int out,
                          const char *attrs, int opset) {
    kiln_attr *a = NULL;
    int na = 0;
    if (attrs && kiln_attrs_parse(m->ctx, attrs, &a, &na) != KILN_OK) return -1;
    char unique[300]; /* one hint for a rewrite's nodes (and exporters' names may be empty) */
    snprintf(unique, sizeof unique, "%.200s#%d", name, m->n_nodes);
    const int i = kiln_model_add_node_raw(m, op, unique, "", n_in, in, 1, &out, na, a);
    if (i >= 0) m->nodes[i].opset = opset;
    return i;
}

void kiln_pass_drop_if_unused(kiln_model *m, int v) {
    if (v < 0 || !m->values[v].init || m->values[v].is_input || kiln_pass_uses(m, v)) return;
    kiln_tensor_free(m->values[v].init);
    m->values[v].init = NULL;
}

kiln_status kiln_pass_set_output(kiln_model *m, int node, int k, int v) {
    kiln_node *n = &m->nodes[node];
    if (k >= n->n_out) {
        int *out = realloc(n->out, ((size_t)k + 1) * sizeof *out);
        if (!out) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for node outputs");
        for (int j = n->n_out; j <= k; j++) out[j] = -1;
        n->out = out;
        n->n_out = k + 1;
    }
    n->out[k] = v;
    return KILN_OK;
}

kiln_status kiln_pass_set_input(kiln_model *m, int node, int k, int v) {
    kiln_node *n = &m->nodes[node];
    if (k >= n->n_in) {
        int *in = realloc(n->in, ((size_t)k + 2) * sizeof *in);
        if (!in) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for node inputs");
        for (int j = n->n_in; j <= k; j++) in[j] = -1;
        n->in = in;
        n->n_in = k + 1;
    }
    n->in[k] = v;
    return KILN_OK;
}

/* The attribute called name of node (added, cleared, when absent); NULL on OOM. */
static kiln_attr *attr_slot(kiln_model *m, int node, const char *name) {
    kiln_node *n = &m->nodes[node];
    for (int a = 0; a < n->n_attrs; a++)
        if (strcmp(n->attrs[a].name, name) == 0) {
            kiln_attr_clear(&n->attrs[a]);
            n->attrs[a].name = kiln_strdup(m->ctx, name);
            return n->attrs[a].name ? &n->attrs[a] : NULL;
        }
    kiln_attr *attrs = realloc(n->attrs, ((size_t)n->n_attrs + 1) * sizeof *attrs);
    if (!attrs) return NULL;
    n->attrs = attrs;
    kiln_attr *a = &attrs[n->n_attrs];
    memset(a, 0, sizeof *a);
    a->name = kiln_strdup(m->ctx, name);
    if (!a->name) return NULL;
    n->n_attrs++;
    return a;
}

kiln_status kiln_pass_set_float(kiln_model *m, int node, const char *name, float v) {
    kiln_attr *a = attr_slot(m, node, name);
    if (!a) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for an attribute");
    a->type = KILN_ATTR_FLOAT;
    a->f = v;
    return KILN_OK;
}

kiln_status kiln_pass_set_int(kiln_model *m, int node, const char *name, int64_t v) {
    kiln_attr *a = attr_slot(m, node, name);
    if (!a) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for an attribute");
    a->type = KILN_ATTR_INT;
    a->i = v;
    return KILN_OK;
}

kiln_status kiln_pass_set_string(kiln_model *m, int node, const char *name, const char *v) {
    kiln_attr *a = attr_slot(m, node, name);
    if (!a || !(a->s = kiln_strdup(m->ctx, v)))
        return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for an attribute");
    a->type = KILN_ATTR_STRING;
    return KILN_OK;
}

kiln_status kiln_pass_rewrite(kiln_model *m, int i, const char *domain, const char *op_type,
                              int n_in, const int *in, const kiln_node *src) {
    kiln_context *ctx = m->ctx;
    const int na = src ? src->n_attrs : 0;
    kiln_attr *attrs = na ? kiln_calloc(ctx, (size_t)na, sizeof *attrs, "attributes") : NULL;
    int *ins = kiln_calloc(ctx, (size_t)n_in + 1, sizeof *ins, "node inputs");
    char *dom = kiln_strdup(ctx, domain), *op = kiln_strdup(ctx, op_type);
    bool ok = (attrs || !na) && ins && dom && op;
    int copied = 0;
    for (; ok && copied < na; copied++) ok = kiln_attr_copy(ctx, &attrs[copied], &src->attrs[copied]) == KILN_OK;
    if (!ok) {
        for (int a = 0; a < copied; a++) kiln_attr_clear(&attrs[a]);
        free(attrs);
        free(ins);
        free(dom);
        free(op);
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory rewriting a node");
    }
    kiln_node *n = &m->nodes[i];
    for (int a = 0; a < n->n_attrs; a++) kiln_attr_clear(&n->attrs[a]);
    free(n->attrs);
    free(n->in);
    free(n->domain);
    free(n->op_type);
    memcpy(ins, in, (size_t)n_in * sizeof *ins);
    n->attrs = attrs;
    n->n_attrs = na;
    n->in = ins;
    n->n_in = n_in;
    n->domain = dom;
    n->op_type = op;
    n->op = -1;
    return KILN_OK;
}

kiln_status kiln_pass_drop_unread_constants(kiln_model *m, bool *changed) {
    int *uses = kiln_calloc(m->ctx, (size_t)m->n_values + 1, sizeof *uses, "a pass");
    bool *dead = kiln_calloc(m->ctx, (size_t)m->n_nodes + 1, sizeof *dead, "a pass");
    if (!uses || !dead) {
        free(uses);
        free(dead);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_in; k++)
            if (m->nodes[i].in[k] >= 0) uses[m->nodes[i].in[k]]++;
    for (int i = 0; i < m->n_outputs; i++) uses[m->outputs[i]]++;
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *n = &m->nodes[i];
        dead[i] = kiln_pass_is(n, "Constant") && n->n_out == 1 && n->out[0] >= 0 && !uses[n->out[0]];
        *changed |= dead[i];
    }
    kiln_pass_remove_nodes(m, dead);
    free(uses);
    free(dead);
    return KILN_OK;
}

kiln_status kiln_pass_remove_sorted(kiln_model *m, const bool *dead, int n) {
    bool *all = calloc((size_t)m->n_nodes + 1, sizeof *all);
    if (!all) return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    if (n > 0) memcpy(all, dead, (size_t)n * sizeof *all);
    kiln_pass_remove_nodes(m, all);
    free(all);
    return kiln_pass_sort_nodes(m);
}

kiln_status kiln_pass_each_node(kiln_model *m, const char *op_type, kiln_pass_node_fn fn, bool *changed) {
    bool any = false;
    for (int i = 0; i < m->n_nodes && !any; i++) any = kiln_pass_is(&m->nodes[i], op_type);
    if (!any) return KILN_OK;
    kiln_shape_probes pr;
    kiln_status st;
    if (!kiln_pass_shape_probes_or_skip(m, &pr, &st)) return st;
    const int nn = m->n_nodes;
    bool *dead = calloc((size_t)nn + 1, sizeof *dead);
    if (!dead) st = kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    bool done_any = false;
    for (int i = 0; i < nn && !st; i++) {
        if (!kiln_pass_is(&m->nodes[i], op_type)) continue;
        bool done = false;
        st = fn(m, &pr, i, dead, &done);
        done_any |= done;
    }
    if (!st && done_any) {
        st = kiln_pass_remove_sorted(m, dead, nn);
        *changed = true;
    }
    kiln_pass_shape_probes_free(&pr);
    free(dead);
    return st;
}

bool kiln_pass_all_ints(const kiln_node *n, const char *name, int64_t v) {
    int c = 0;
    const int64_t *a = kiln_attr_ints(n, name, &c);
    for (int i = 0; a && i < c; i++)
        if (a[i] != v) return false;
    return true;
}
