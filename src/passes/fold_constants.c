/*
 * fold_constants.c — the fold-constants pass: a node whose inputs are all constants
 * (initializers that are not graph inputs, Constant nodes' values, outputs of nodes this
 * pass folded) runs once, by its CPU reference (kiln_op_eval), and its outputs become
 * initializers, before the fusions, so that they see a constant a subgraph computes as a
 * constant. torchvision's Swin V2 writes its attention's qkv bias as ScatterND(qkv.bias,
 * indices, zeros) (the K third zeroed): folded only at plan time, after every pass, it left
 * fuse-conv's MatMul + bias unfused (bench/NOTES.md, the fourteenth session).
 *
 * Left as computations: nodes without inputs (Constant: passes read those as constants
 * already), random ops (a new draw every run), nodes reading a graph input even for its
 * shape only (its dims may be symbolic, or the caller's to change), outputs that are graph
 * outputs, and outputs over FOLD_MAX_BYTES each (plan-time folding still folds them; as
 * initializers they would be held twice while the model is rewritten). A node whose
 * inference or reference fails is left for the plan to report. Training graphs keep their
 * weights as graph inputs, so nothing computed from a weight folds.
 */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

#define FOLD_MAX_BYTES ((int64_t)64 << 20)

kiln_status kiln_pass_fold_constants(kiln_model *m, const kiln_pass_options *o, bool *changed) {
    (void)o;
    *changed = false;
    kiln_context *ctx = m->ctx;
    const int nn = m->n_nodes, nv = m->n_values;
    int max_io = 1;
    for (int i = 0; i < nn; i++) {
        if (m->nodes[i].n_in > max_io) max_io = m->nodes[i].n_in;
        if (m->nodes[i].n_out > max_io) max_io = m->nodes[i].n_out;
    }
    int *order = malloc(((size_t)nn + 1) * sizeof *order);
    int *prod = kiln_pass_producers(m);
    bool *dead = calloc((size_t)nn + 1, sizeof *dead);
    kiln_tensor **ins = calloc((size_t)max_io, sizeof *ins), **outs = calloc((size_t)max_io, sizeof *outs);
    kiln_tensor **folded = calloc((size_t)max_io, sizeof *folded);
    kiln_tensor *shapes = calloc((size_t)max_io, sizeof *shapes);
    bool *was_read = calloc((size_t)nv + 1, sizeof *was_read); /* by a folded node */
    kiln_status st = order && prod && dead && ins && outs && folded && shapes && was_read
                         ? kiln_pass_topo_order(m, order)
                         : kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "fold-constants: out of memory (%d nodes)", nn);
    int n_folded = 0;
    for (int oi = 0; oi < nn && !st; oi++) {
        const int i = order[oi];
        kiln_node *n = &m->nodes[i];
        if (n->n_in == 0 || n->n_out == 0) continue;
        const int op = kiln_op_index_domain(n->domain, n->op_type);
        const kiln_op_def *d = op >= 0 ? kiln_op_get(op) : NULL;
        if (!d || d->random) continue;
        bool ok = true;
        for (int k = 0; k < n->n_in && ok; k++) {
            const int v = n->in[k];
            if (v < 0) {
                ins[k] = NULL;
                continue;
            }
            const kiln_tensor *t = m->values[v].is_input ? NULL : kiln_pass_constant(m, prod, v);
            ins[k] = (kiln_tensor *)t;
            ok = t != NULL;
        }
        for (int k = 0; k < n->n_out && ok; k++) ok = n->out[k] >= 0 && !m->values[n->out[k]].is_output;
        if (!ok) continue;
        n->op = op;
        /* the outputs' shapes first: none over the cap is computed */
        memset(shapes, 0, (size_t)n->n_out * sizeof *shapes);
        for (int k = 0; k < n->n_out; k++) outs[k] = &shapes[k];
        kiln_op_ctx c = {.kctx = ctx, .node = n, .n_in = n->n_in, .in = ins, .n_out = n->n_out, .out = outs};
        ok = d->infer(&c) == KILN_OK;
        for (int k = 0; k < n->n_out && ok; k++)
            ok = kiln_dtype_valid(shapes[k].dtype) && shapes[k].ndim >= 0 &&
                 kiln_tensor_numel(&shapes[k]) * (int64_t)kiln_dtype_size(shapes[k].dtype) <= FOLD_MAX_BYTES;
        memset(folded, 0, (size_t)n->n_out * sizeof *folded);
        if (ok && kiln_op_eval(ctx, n, n->n_in, ins, n->n_out, folded) != KILN_OK) ok = false;
        for (int k = 0; k < n->n_out && ok; k++) ok = folded[k] != NULL;
        if (!ok) {
            for (int k = 0; k < n->n_out; k++) kiln_tensor_free(folded[k]);
            kiln_clear_error(ctx); /* left for the plan, which names the node if it fails there */
            continue;
        }
        for (int k = 0; k < n->n_out; k++) {
            kiln_value *val = &m->values[n->out[k]];
            val->init = folded[k];
            val->dtype = folded[k]->dtype;
            val->ndim = folded[k]->ndim;
            memcpy(val->dims, folded[k]->dims, sizeof val->dims);
            val->producer = -1;
            prod[n->out[k]] = -1;
        }
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0) was_read[n->in[k]] = true;
        dead[i] = true;
        n_folded++;
    }
    if (!st && n_folded) {
        kiln_pass_remove_nodes(m, dead);
        /* the folded nodes' inputs that nothing reads any more (a bias's original) */
        for (int v = 0; v < nv; v++)
            if (was_read[v]) kiln_pass_drop_if_unused(m, v);
        bool dropped = false;
        st = kiln_pass_drop_unread_constants(m, &dropped);
        *changed = true;
    }
    free(order);
    free(prod);
    free(dead);
    free(ins);
    free(outs);
    free(folded);
    free(shapes);
    free(was_read);
    return st;
}
