/* infer.c — what passes know about an open model's values: a topological order of its
 * nodes and the dtype (and an indicative shape) of every value.
 *
 * The values of a clone carry dtypes only where static inference ran at finalize, which it
 * skips when a graph input has a symbolic dim (the usual batch dim); passes that reason
 * about dtypes (precision) infer them here. Symbolic dims are taken as 1: ops' dtype rules
 * do not depend on dim sizes, and where a shape rule then fails (a Reshape to a fixed
 * batch, a shape computed from a run-time value) a table of output dtypes by op takes
 * over for that node and the nodes after it. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

kiln_status kiln_pass_topo_order(const kiln_model *m, int *order) {
    int nv = m->n_values, nn = m->n_nodes;
    int *producer = malloc(((size_t)nv + 1) * sizeof *producer);
    bool *done = calloc((size_t)nn + 1, sizeof *done);
    if (!producer || !done) {
        free(producer);
        free(done);
        return kiln_fail(m->ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (int v = 0; v < nv; v++) producer[v] = -1;
    for (int i = 0; i < nn; i++)
        for (int k = 0; k < m->nodes[i].n_out; k++)
            if (m->nodes[i].out[k] >= 0) producer[m->nodes[i].out[k]] = i;
    /* Repeated sweeps in the current order: one sweep when the nodes are already sorted
     * (a clone of a finalized model), a few when a pass appended nodes. */
    int placed = 0;
    bool progress = true;
    while (placed < nn && progress) {
        progress = false;
        for (int i = 0; i < nn; i++) {
            if (done[i]) continue;
            bool ready = true;
            for (int k = 0; k < m->nodes[i].n_in && ready; k++) {
                int v = m->nodes[i].in[k];
                ready = v < 0 || producer[v] < 0 || done[producer[v]];
            }
            if (!ready) continue;
            done[i] = true;
            order[placed++] = i;
            progress = true;
        }
    }
    free(producer);
    free(done);
    if (placed < nn) return kiln_fail(m->ctx, KILN_ERR_GRAPH, "the graph has a cycle");
    return KILN_OK;
}

/* Output k's dtype when inference cannot run: the op's out_dtype rule (input 0's by
 * default, and for ops outside the registry). */
static kiln_dtype rule_dtype(const kiln_node *n, int k, const kiln_tensor *vt) {
    kiln_dtype in0 = n->n_in > 0 && n->in[0] >= 0 ? vt[n->in[0]].dtype : KILN_DTYPE_UNDEFINED;
    kiln_dtype in1 = n->n_in > 1 && n->in[1] >= 0 ? vt[n->in[1]].dtype : KILN_DTYPE_UNDEFINED;
    kiln_dtype in2 = n->n_in > 2 && n->in[2] >= 0 ? vt[n->in[2]].dtype : KILN_DTYPE_UNDEFINED;
    const kiln_op_def *d = kiln_node_def(n);
    const kiln_dtype_rule r = d && k >= 0 && k < 4 ? (kiln_dtype_rule)d->out_dtype[k] : KILN_DT_IN0;
    switch (r) {
    case KILN_DT_IN0: return in0;
    case KILN_DT_IN1: return in1;
    case KILN_DT_I64: return KILN_I64;
    case KILN_DT_BOOL: return KILN_BOOL;
    case KILN_DT_ATTR_TO: return (kiln_dtype)kiln_attr_int(n, "to", 0);
    case KILN_DT_VALUE:
    case KILN_DT_VALUE_OR_F32:
        for (int a = 0; a < n->n_attrs; a++) {
            const kiln_attr *at = &n->attrs[a];
            if (at->type == KILN_ATTR_TENSOR && at->t) return at->t->dtype;
            if (strncmp(at->name, "value_float", 11) == 0) return KILN_F32;
            if (strncmp(at->name, "value_int", 9) == 0) return KILN_I64;
        }
        return r == KILN_DT_VALUE_OR_F32 ? KILN_F32 : KILN_DTYPE_UNDEFINED;
    case KILN_DT_F32: return in0 == KILN_F64 ? KILN_F64 : KILN_F32;
    case KILN_DT_IN2: return in2;
    case KILN_DT_ATTR_OUTPUT_DATATYPE: return (kiln_dtype)kiln_attr_int(n, "output_datatype", KILN_F32);
    case KILN_DT_U8: return KILN_U8;
    }
    return in0;
}

kiln_status kiln_pass_infer_types(kiln_model *m, kiln_tensor **out) { return kiln_pass_infer_shapes(m, 1, out); }

static kiln_status infer_shapes(kiln_model *m, int64_t symbolic, kiln_tensor **out, kiln_tensor ***keep) {
    *out = NULL;
    kiln_context *ctx = m->ctx;
    int nv = m->n_values, nn = m->n_nodes;
    kiln_tensor *vt = calloc((size_t)nv + 1, sizeof *vt);
    kiln_tensor **held = calloc((size_t)nv + 1, sizeof *held); /* folded shape values (owned) */
    int *order = malloc(((size_t)nn + 1) * sizeof *order);
    int max_io = 1;
    for (int i = 0; i < nn; i++) {
        if (m->nodes[i].n_in > max_io) max_io = m->nodes[i].n_in;
        if (m->nodes[i].n_out > max_io) max_io = m->nodes[i].n_out;
    }
    /* one node's operands: inputs, output shapes, pointers to them, folded outputs */
    kiln_tensor **ins = calloc((size_t)max_io, sizeof *ins), **outs = calloc((size_t)max_io, sizeof *outs);
    kiln_tensor **folded = calloc((size_t)max_io, sizeof *folded);
    kiln_tensor *shapes = calloc((size_t)max_io, sizeof *shapes);
    if (!vt || !held || !order || !ins || !outs || !folded || !shapes) {
        free(vt);
        free(held);
        free(order);
        free(ins);
        free(outs);
        free(folded);
        free(shapes);
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory");
    }
    kiln_status st = kiln_pass_topo_order(m, order);
    for (int v = 0; v < nv && !st; v++) {
        const kiln_value *val = &m->values[v];
        vt[v].ndim = -1;
        if (val->init) {
            vt[v] = *val->init;
            vt[v].owns_data = false;
        } else if (val->is_input) {
            vt[v].dtype = val->dtype;
            vt[v].ndim = val->ndim;
            for (int d = 0; d < val->ndim && d < KILN_MAX_DIMS; d++) vt[v].dims[d] = val->dims[d] < 0 ? symbolic : val->dims[d];
        }
    }
    for (int oi = 0; oi < nn && !st; oi++) {
        kiln_node *n = &m->nodes[order[oi]];
        /* written only where it changes: a finalized model shared by threads
         * (kiln_model_output_info) is only read */
        const int op = kiln_op_index_domain(n->domain, n->op_type);
        if (n->op != op) n->op = op;
        const kiln_op_def *d = n->op >= 0 ? kiln_op_get(n->op) : NULL;
        bool ok = d != NULL;
        for (int k = 0; ok && k < n->n_in; k++) {
            int v = n->in[k];
            ins[k] = v >= 0 ? &vt[v] : NULL;
            if (v < 0) continue;
            bool needs_data = kiln_input_in_mask(d->value_inputs, k);
            ok = kiln_dtype_valid(vt[v].dtype) && vt[v].ndim >= 0 && (!needs_data || vt[v].data);
        }
        if (ok) {
            memset(shapes, 0, (size_t)n->n_out * sizeof *shapes);
            for (int k = 0; k < n->n_out; k++) outs[k] = &shapes[k];
            kiln_op_ctx c = {.kctx = ctx, .node = n, .n_in = n->n_in, .in = ins, .n_out = n->n_out, .out = outs};
            ok = d->infer(&c) == KILN_OK;
            for (int k = 0; ok && k < n->n_out; k++) ok = kiln_dtype_valid(shapes[k].dtype) && shapes[k].ndim >= 0;
        }
        if (!ok) {
            for (int k = 0; k < n->n_out; k++)
                if (n->out[k] >= 0) {
                    memset(&vt[n->out[k]], 0, sizeof vt[0]);
                    vt[n->out[k]].dtype = rule_dtype(n, k, vt);
                    vt[n->out[k]].ndim = -1;
                }
            continue;
        }
        bool fold = !d->random; /* a new draw every run */
        for (int k = 0; k < n->n_in && fold; k++) {
            bool shape_only = kiln_input_in_mask(d->shape_only_inputs, k);
            fold = n->in[k] < 0 || vt[n->in[k]].data || shape_only;
        }
        for (int k = 0; k < n->n_out && fold; k++) fold = kiln_tensor_numel(&shapes[k]) <= 64;
        memset(folded, 0, (size_t)n->n_out * sizeof *folded);
        /* Small constants are computed: shapes downstream (Reshape's shape...) need them. */
        if (fold && kiln_op_eval(ctx, n, n->n_in, ins, n->n_out, folded) != KILN_OK) fold = false;
        for (int k = 0; k < n->n_out; k++) {
            int v = n->out[k];
            if (v < 0) {
                kiln_tensor_free(folded[k]);
                continue;
            }
            vt[v] = shapes[k];
            vt[v].data = NULL;
            if (fold && folded[k]) {
                kiln_tensor_free(held[v]);
                held[v] = folded[k];
                vt[v].data = folded[k]->data;
            }
        }
    }
    if (!st) kiln_clear_error(ctx); /* messages of nodes the table handled */
    for (int v = 0; v < nv; v++) {
        if (!st && keep) continue; /* initializers' data stays too (the model's) */
        kiln_tensor_free(held[v]);
        held[v] = NULL;
        vt[v].data = NULL;
        vt[v].owns_data = false;
    }
    if (!st && keep) *keep = held;
    else free(held);
    free(order);
    free(ins);
    free(outs);
    free(folded);
    free(shapes);
    if (st) {
        free(vt);
        return st;
    }
    *out = vt;
    return KILN_OK;
}

kiln_status kiln_pass_infer_shapes(kiln_model *m, int64_t symbolic, kiln_tensor **out) {
    return infer_shapes(m, symbolic, out, NULL);
}

kiln_status kiln_pass_infer_values(kiln_model *m, int64_t symbolic, kiln_tensor **out, kiln_tensor ***held) {
    *held = NULL;
    return infer_shapes(m, symbolic, out, held);
}

kiln_status kiln_pass_shape_probes(kiln_model *m, kiln_shape_probes *out) {
    memset(out, 0, sizeof *out);
    out->n = m->n_values;
    kiln_status st = kiln_pass_infer_shapes(m, 1, &out->one);
    if (!st) st = kiln_pass_infer_shapes(m, 3, &out->three);
    if (st) kiln_pass_shape_probes_free(out);
    return st;
}

bool kiln_pass_shape_probes_or_skip(kiln_model *m, kiln_shape_probes *out, kiln_status *st) {
    *st = kiln_pass_shape_probes(m, out);
    if (*st == KILN_OK) return true;
    if (*st != KILN_ERR_OUT_OF_MEMORY) *st = KILN_OK; /* uninferable: the pass leaves the graph */
    return false;
}

kiln_status kiln_pass_known_dims(kiln_model *m, kiln_tensor **out) {
    static const int64_t probes[] = {5, 320, 448};
    kiln_tensor *known = NULL;
    kiln_status st = kiln_pass_infer_shapes(m, probes[0], &known);
    for (size_t r = 1; r < sizeof probes / sizeof probes[0] && !st; r++) {
        kiln_tensor *t = NULL;
        st = kiln_pass_infer_shapes(m, probes[r], &t);
        for (int v = 0; v < m->n_values && !st; v++) {
            kiln_tensor *k = &known[v];
            if (k->ndim != t[v].ndim) k->ndim = -1;
            for (int d = 0; d < k->ndim; d++)
                if (k->dims[d] != t[v].dims[d]) k->dims[d] = -1;
        }
        free(t);
    }
    if (st) {
        free(known);
        known = NULL;
    }
    *out = known;
    return st;
}

void kiln_pass_shape_probes_free(kiln_shape_probes *p) {
    free(p->one);
    free(p->three);
    memset(p, 0, sizeof *p);
}

static bool same_dims(const kiln_tensor *a, const kiln_tensor *b) {
    if (a->ndim < 0 || a->ndim != b->ndim || a->dtype != b->dtype || !kiln_dtype_valid(a->dtype)) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

bool kiln_pass_same_shape(const kiln_shape_probes *p, int a, int b) {
    if (a < 0 || b < 0 || a >= p->n || b >= p->n) return false;
    return same_dims(&p->one[a], &p->one[b]) && same_dims(&p->three[a], &p->three[b]);
}
