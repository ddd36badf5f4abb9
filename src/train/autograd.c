/*
 * autograd.c — reverse-mode differentiation of a static graph, symbolically: the
 * gradient rules of the ops (kiln_op_def.grad) emit nodes into the same graph, so the
 * forward and backward passes are planned together (one arena, lifetimes across both).
 *
 * Gradients are "set to none" by construction: dL/dv is a value written once by the
 * node that computes it; a value used several times gets its contributions added by
 * Sum nodes. Nothing is zeroed and nothing accumulates across steps.
 */
#include "../core/internal.h"
#include "../passes/passes.h" /* kiln_shape_probes */
#include "autograd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fresh_value(kiln_model *m, const char *hint) {
    char name[256];
    snprintf(name, sizeof name, "grad:%s#%d", hint, m->n_values);
    return kiln_model_get_value(m, name);
}

int kiln_grad_emit(kiln_grad_ctx *g, const char *domain, const char *op, int n_in, const int *in,
                   int n_out, int *outs, bool copy_attrs, const char *attrs) {
    kiln_model *m = g->m;
    kiln_context *ctx = m->ctx;
    const kiln_node *fwd = KILN_GRAD_NODE(g);
    kiln_attr *extra = NULL, *all = NULL;
    int n_extra = 0, n_all = 0;
    if (kiln_attrs_parse(ctx, attrs, &extra, &n_extra)) return -1;
    int cap = (copy_attrs ? fwd->n_attrs : 0) + n_extra;
    all = cap ? kiln_calloc(ctx, (size_t)cap, sizeof *all, "attributes") : NULL;
    bool ok = !cap || all;
    for (int a = 0; ok && copy_attrs && a < fwd->n_attrs; a++) {
        bool overridden = false;
        for (int e = 0; e < n_extra; e++) overridden |= strcmp(extra[e].name, fwd->attrs[a].name) == 0;
        if (overridden) continue;
        ok = kiln_attr_copy(ctx, &all[n_all], &fwd->attrs[a]) == KILN_OK;
        n_all += ok;
    }
    for (int e = 0; ok && e < n_extra; e++) {
        all[n_all++] = extra[e];
        memset(&extra[e], 0, sizeof extra[e]);
    }
    for (int e = 0; e < n_extra; e++) kiln_attr_clear(&extra[e]);
    free(extra);
    int out_local[16]; /* callers of more outputs pass outs */
    int *o = outs ? outs : out_local;
    if (!ok || (!outs && n_out > 16)) {
        for (int a = 0; a < n_all; a++) kiln_attr_clear(&all[a]);
        free(all);
        return -1;
    }
    char hint[160];
    snprintf(hint, sizeof hint, "%s/%s", fwd->name[0] ? fwd->name : fwd->op_type, op);
    int opset = fwd->opset;
    for (int k = 0; k < n_out; k++) {
        o[k] = fresh_value(m, hint);
        if (o[k] < 0) {
            for (int a = 0; a < n_all; a++) kiln_attr_clear(&all[a]);
            free(all);
            return -1;
        }
    }
    char name[200];
    snprintf(name, sizeof name, "%s#%d", hint, m->n_nodes);
    int idx = kiln_model_add_node_raw(m, op, name, domain, n_in, in, n_out, o, n_all, all);
    if (idx < 0) return -1;
    m->nodes[idx].opset = opset;
    return o[0];
}

int kiln_grad_unbroadcast(kiln_grad_ctx *g, int grad, int like) {
    /* a residual Add's gradients: nothing to sum (the node would cost a copy, and under amp
     * the f32 NCHW conversions around it) */
    if (grad >= 0 && g->probes && kiln_pass_same_shape(g->probes, KILN_GRAD_OUT(g, 0), like)) return grad;
    int in[2] = {grad, like};
    return kiln_grad_emit(g, "kiln", "ReduceSumTo", 2, in, 1, NULL, false, NULL);
}

/* A constant shaped like value v, in v's dtype: ConstantOfShape(Shape(v)) with `fill`,
 * folded by the planner. dL/dloss = 1; a parameter the loss does not reach gets 0. */
static int constant_like(kiln_grad_ctx *g, int v, double fill) {
    kiln_model *m = g->m;
    int shape = kiln_grad_emit(g, NULL, "Shape", 1, &v, 1, NULL, false, NULL);
    if (shape < 0) return -1;
    int c = kiln_grad_emit(g, NULL, "ConstantOfShape", 1, &shape, 1, NULL, false, NULL);
    if (c < 0) return -1;
    kiln_node *n = &m->nodes[m->n_nodes - 1];
    kiln_attr *a = realloc(n->attrs, sizeof *a * (size_t)(n->n_attrs + 1));
    if (!a) return -1;
    n->attrs = a;
    kiln_attr *val = &a[n->n_attrs];
    memset(val, 0, sizeof *val);
    val->type = KILN_ATTR_TENSOR;
    val->name = kiln_strdup(m->ctx, "value");
    kiln_dtype dt = kiln_dtype_is_float(m->values[v].dtype) ? m->values[v].dtype : KILN_F32;
    val->t = kiln_tensor_new(m->ctx, dt, 1, (int64_t[]){1});
    if (!val->name || !val->t) {
        kiln_attr_clear(val);
        return -1;
    }
    kiln_set_f64(val->t, 0, fill);
    n->n_attrs++;
    return c;
}

kiln_status kiln_autograd(kiln_model *m, int loss, int n_params, const int *params, int *grads) {
    return kiln_autograd_seeded(m, loss, -1, n_params, params, grads);
}

/* Whether the graph inputs' symbolic dims are one dim at run time: all of one name, or all
 * leading dims (the batch: a trainer feeds every input a batch of one size). */
static bool one_symbolic_dim(const kiln_model *m) {
    const char *name = NULL;
    bool named = true, leading = true;
    for (int i = 0; i < m->n_inputs; i++) {
        const kiln_value *v = &m->values[m->inputs[i]];
        for (int d = 0; d < v->ndim; d++) {
            if (v->dims[d] >= 0) continue;
            leading &= d == 0;
            if (!v->dim_param[d] || (name && strcmp(name, v->dim_param[d]) != 0)) named = false;
            else name = v->dim_param[d];
        }
    }
    return named || leading;
}

kiln_status kiln_autograd_seeded(kiln_model *m, int loss, int seed, int n_params, const int *params, int *grads) {
    kiln_context *ctx = m->ctx;
    const int n_fwd = m->n_nodes;
    int nv0 = m->n_values;
    kiln_status st = KILN_OK;
    kiln_shape_probes probes = {0}; /* below */
    bool *needs = kiln_calloc(ctx, (size_t)nv0 + 1, sizeof(bool), "autograd");
    bool *reaches = kiln_calloc(ctx, (size_t)nv0 + 1, sizeof(bool), "autograd");
    int *grad = NULL, *dy = NULL, *dx = NULL;
    bool *need = NULL;
    if (!needs || !reaches) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    if (loss < 0 || loss >= nv0) {
        st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "autograd: the loss value is not in the graph");
        goto out;
    }
    for (int i = 0; i < n_params; i++) needs[params[i]] = true;
    /* A value needs a gradient when it depends on a parameter through a differentiable
     * input, and is not known to be an integer or bool (comparisons, ArgMax, Shape). */
    for (int i = 0; i < n_fwd; i++) {
        const kiln_node *n = &m->nodes[i];
        const kiln_op_def *d = kiln_op_get(kiln_op_index_domain(n->domain, n->op_type));
        bool any = false;
        for (int k = 0; k < n->n_in; k++)
            any |= n->in[k] >= 0 && needs[n->in[k]] && !(d && kiln_input_in_mask(d->nondiff_inputs, k)) &&
                   !(d && kiln_input_in_mask(d->shape_only_inputs, k));
        for (int k = 0; any && k < n->n_out; k++) {
            kiln_dtype dt = m->values[n->out[k]].dtype;
            needs[n->out[k]] = dt == KILN_DTYPE_UNDEFINED || kiln_dtype_is_float(dt);
        }
    }
    reaches[loss] = true;
    for (int i = n_fwd - 1; i >= 0; i--) {
        const kiln_node *n = &m->nodes[i];
        bool any = false;
        for (int k = 0; k < n->n_out; k++) any |= reaches[n->out[k]];
        for (int k = 0; any && k < n->n_in; k++)
            if (n->in[k] >= 0) reaches[n->in[k]] = true;
    }
    /* grad[v] for forward values; grows as values are added (indices >= nv0 are never read). */
    grad = kiln_calloc(ctx, (size_t)nv0 + 1, sizeof(int), "autograd");
    if (!grad) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    for (int v = 0; v < nv0; v++) grad[v] = -1;
    kiln_grad_ctx g = {.m = m, .node = -1};
    /* dY, dX and need of one node at a time, as long as the widest node (a DenseNet block's
     * Concat has one input per layer) */
    int width = 1;
    for (int i = 0; i < n_fwd; i++) {
        if (m->nodes[i].n_in > width) width = m->nodes[i].n_in;
        if (m->nodes[i].n_out > width) width = m->nodes[i].n_out;
    }
    dy = kiln_calloc(ctx, (size_t)width, sizeof *dy, "autograd");
    dx = kiln_calloc(ctx, (size_t)width, sizeof *dx, "autograd");
    need = kiln_calloc(ctx, (size_t)width, sizeof *need, "autograd");
    if (!dy || !dx || !need) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    /* The forward values' shapes under two probes of the symbolic dims, when those probes
     * tell shapes apart: the symbolic input dims are one dim (the batch), so setting them
     * all to one probe value keeps dims that differ at run time apart. */
    if (n_fwd > 0 && one_symbolic_dim(m)) {
        if ((st = kiln_pass_shape_probes(m, &probes))) goto out;
        g.probes = &probes;
    }
    if (n_fwd == 0) {
        st = kiln_fail(ctx, KILN_ERR_GRAPH, "autograd: the graph has no nodes");
        goto out;
    }
    g.node = m->values[loss].producer >= 0 ? m->values[loss].producer : 0;
    grad[loss] = seed >= 0 ? seed : constant_like(&g, loss, 1.0);
    if (grad[loss] < 0) {
        st = kiln_context_message(ctx)[0] ? KILN_ERR_OUT_OF_MEMORY : kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "autograd: out of memory");
        goto out;
    }
    for (int i = n_fwd - 1; i >= 0; i--) {
        const kiln_node *n = &m->nodes[i];
        bool any_dy = false, any_need = false;
        for (int k = 0; k < n->n_out; k++) {
            dy[k] = grad[n->out[k]];
            any_dy |= dy[k] >= 0;
        }
        const kiln_op_def *dd = kiln_op_get(kiln_op_index_domain(n->domain, n->op_type));
        for (int k = 0; k < n->n_in; k++) {
            need[k] = n->in[k] >= 0 && needs[n->in[k]] && !(dd && kiln_input_in_mask(dd->nondiff_inputs, k)) &&
                      !(dd && kiln_input_in_mask(dd->shape_only_inputs, k));
            any_need |= need[k];
            dx[k] = -1;
        }
        if (!any_dy || !any_need) continue;
        const kiln_op_def *d = kiln_op_get(kiln_op_index_domain(n->domain, n->op_type));
        if (!d || !d->grad) {
            st = kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "autograd: %s node '%s' has no gradient rule", n->op_type, n->name);
            goto out;
        }
        g.node = i;
        g.dy = dy;
        g.dx = dx;
        g.need = need;
        kiln_clear_error(ctx);
        st = d->grad(&g);
        if (st) {
            if (!kiln_context_message(ctx)[0]) kiln_fail(ctx, st, "autograd: gradient of %s node '%s' failed", n->op_type, n->name);
            goto out;
        }
        n = &m->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            if (!need[k]) continue;
            if (dx[k] < 0) {
                st = kiln_fail(ctx, KILN_ERR_INTERNAL, "autograd: the rule of %s node '%s' left input %d without a gradient",
                               n->op_type, n->name, k);
                goto out;
            }
            int v = n->in[k];
            if (grad[v] < 0) {
                grad[v] = dx[k];
            } else {
                int pair[2] = {grad[v], dx[k]};
                grad[v] = kiln_grad_emit(&g, NULL, "Sum", 2, pair, 1, NULL, false, NULL);
                if (grad[v] < 0) {
                    st = KILN_ERR_OUT_OF_MEMORY;
                    goto out;
                }
                n = &m->nodes[i]; /* the emit may have moved the node array */
            }
        }
    }
    for (int i = 0; i < n_params; i++) {
        int p = params[i];
        if (grad[p] < 0) {
            /* A parameter that does not reach the loss gets a zero gradient. */
            g.node = 0;
            int z = constant_like(&g, p, 0.0);
            if (z < 0) {
                st = KILN_ERR_OUT_OF_MEMORY;
                goto out;
            }
            grad[p] = z;
        }
        grads[i] = grad[p];
    }
out:
    kiln_pass_shape_probes_free(&probes);
    free(dy);
    free(dx);
    free(need);
    free(needs);
    free(reaches);
    free(grad);
    return st;
}
